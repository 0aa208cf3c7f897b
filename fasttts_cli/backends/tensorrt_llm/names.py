"""File and architecture names shared by the converter, the build, the worker and the fake library."""

ARCHITECTURE = "IndexTTS2GPTForCausalLM"  # registered in tensorrt_llm.models.MODEL_MAP (architecture.py)
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "rank0.safetensors"
ENGINE_FILE = "rank0.engine"
MASKED_LOGIT = -1.0e4  # logit of the text ids in the merged head (finite in fp16 and bf16)
