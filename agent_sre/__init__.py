"""agent-sre: a Kubernetes SRE agent that learns from its own incidents, on Temporal durable execution.

Hugging Face defaults for every process of ours, set here because this package is imported before transformers
and huggingface_hub read them: models load from local files only (a missing file must fail, never turn into a
download), and no tqdm bars (converting, loading, writing shards) clutter CLI output and worker logs, where our
commands report their own progress. An environment that sets them explicitly wins.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
