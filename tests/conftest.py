import sys
import warnings
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*TorchScript.*")
warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*torch.jit.*")
torch.manual_seed(0)

# Test modules whose tests must all run in one xdist worker, one after another: the Ray tests
# share one Ray instance (module-scoped fixture) and Serve's HTTP port. xdist's own
# `--dist loadgroup` does not work with pytest 9 (it renames `item._nodeid`, which pytest 9
# no longer reads), so the scheduler is chosen here: xdist's default (load), except that each
# of these modules is one unit of work.
_ONE_WORKER_MODULES = {"tests/serving/test_serving_ray.py"}


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class _ModulesTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in _ONE_WORKER_MODULES else nodeid

    return _ModulesTogether(config, log)



@pytest.fixture(autouse=True)
def _background_builds_end_with_their_test():
    """What a test's modules build on background threads (shape programs, specialised code)
    finishes before the next test starts: one test's builds never run beside another's
    work."""
    yield
    from static_runtime.runtime.hot import wait_for_builds

    wait_for_builds()
