import pytest
from faultkit import train_args
from trainhelp import summary
from utils import run_rubin


@pytest.fixture(scope="module")
def reference(request, tmp_path_factory):
    """The param digest of an uninterrupted run of the test module's ``REFERENCE_CFG``: what a run that
    was killed, preempted or rolled back must end with."""
    run = tmp_path_factory.mktemp("ref") / "run"
    p = run_rubin(train_args(run, request.module.REFERENCE_CFG))
    assert p.returncode == 0, p.stderr
    return summary(run)["param_digest"]
