"""deepspeed stand-in: the name WeNet imports at module level; raises if called."""

from deepspeed import _unavailable

estimate_zero2_model_states_mem_needs_all_live = _unavailable
