import os

# No test may touch the network: datasets and huggingface_hub read this when first imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
