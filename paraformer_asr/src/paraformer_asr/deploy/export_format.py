"""What an export folder is: the names and versions that its writer (export.py) and its reader (runtime.py) share.

Here, below both, so that the reader does not import the writer: export.py loads checkpoints through inference.py,
whose ``load_model`` loads export folders through runtime.py.
"""

SIDECAR = "export.json"
FORMAT = "paraformer_asr-onnx"
FORMAT_VERSION = 1
OPSET = 17
PRECISIONS = ("fp32", "int8")
KIND_KEY = "paraformer_asr.model_kind"  # metadata of every graph: the model kind and the graph's role
ROLE_KEY = "paraformer_asr.graph"
