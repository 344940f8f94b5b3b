"""Every closed set of allowed values, in one torch-free module: the config, the command-line flags and the modules
that act on a value all import it from here, so a value allowed in one place is allowed everywhere."""

DEVICES = ("auto", "cpu", "cuda")
DATA_KINDS = ("toy", "folder")
RESIZE_MODES = ("resize", "pad", "random_crop")
NORMALIZE_MODES = ("fixed", "dataset", "per_image", "percentile")
COUNTED_NORMALIZE_MODES = ("dataset", "percentile")  # statistics counted over the training images
MODEL_TYPES = ("unet", "unet_transformer")
NORM_KINDS = ("batch", "group", "syncbatch")
ATTENTION_KINDS = ("explicit", "sdpa")
SCHEDULES = ("cosine", "poly")
LOSS_NAMES = ("ce", "dice", "ce_dice", "bce", "bce_dice")
SIGMOID_LOSSES = ("bce", "bce_dice")  # one logit channel, binary masks
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
TTA_MODES = ("none", "flip")
BACKENDS = ("torch", "onnx")
QUANTIZE_MODES = ("int8",)


def check_choice(value, allowed, what: str) -> None:
    """Raise ValueError naming `what` when `value` is not one of `allowed` (modules built without a config)."""
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(map(str, allowed))}, got {value!r}")
