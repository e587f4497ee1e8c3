"""``python -m rubin.launch.keyvault VAULT/SECRET``: print one Azure Key Vault secret, for a job's environment.

Runs inside an Azure ML job, with the job's managed identity, so the value never appears in the job
file. Needs ``azure-identity`` and ``azure-keyvault-secrets`` in the job's image.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or "/" not in argv[0]:
        print("usage: python -m rubin.launch.keyvault VAULT/SECRET", file=sys.stderr)
        return 2
    vault, name = argv[0].split("/", 1)
    try:
        from azure.identity import DefaultAzureCredential
        from azure.keyvault.secrets import SecretClient
    except ImportError:
        print("rubin.launch.keyvault: needs azure-identity and azure-keyvault-secrets in the job's image "
              "(pip install azure-identity azure-keyvault-secrets)", file=sys.stderr)
        return 2
    client = SecretClient(vault_url=f"https://{vault}.vault.azure.net", credential=DefaultAzureCredential())
    sys.stdout.write(client.get_secret(name).value or "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
