"""deepspeed stand-in: the name WeNet imports at module level; raises if called."""

from deepspeed import _unavailable

convert_zero_checkpoint_to_fp32_state_dict = _unavailable
