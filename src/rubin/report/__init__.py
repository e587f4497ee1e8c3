"""One self-contained page from rubin's outputs: ``rubin.report.page.write(inputs, out, fmt)``."""
