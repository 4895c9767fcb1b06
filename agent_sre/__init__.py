"""agent-sre: a Kubernetes SRE agent that learns from its own incidents, on Temporal durable execution.

Hugging Face defaults for every process of ours, set here because this package is imported before transformers
and huggingface_hub read them: models load from local files only (a missing file must fail, never turn into a
download), and no tqdm bars (converting a GGUF, loading, writing shards: TQDM_DISABLE also covers transformers'
own direct use of tqdm) clutter CLI output and worker logs, where our commands report their own progress; and
transformers' advisory warnings only at error level (commands that print progress send the rest of logging to a
file: `cli.common.log_to_file`). An environment that sets them explicitly wins.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
