import sys
import warnings
from pathlib import Path

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
