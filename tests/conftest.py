import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*TorchScript.*")
warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*torch.jit.*")
torch.manual_seed(0)
