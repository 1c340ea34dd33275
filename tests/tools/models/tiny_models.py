"""Tiny randomly initialised perception models saved to folders, for the real-backend tests (no downloads).

Each builder saves a model (and its processor or preprocessing) the way `save_pretrained` does, so the
tools load it through their real loading code. Sizes are the smallest the architectures accept.
"""

from __future__ import annotations

import json
from pathlib import Path

IMAGE_MEAN = (0.5, 0.5, 0.5)


def build_depth_pro(directory: Path, fov_deg: float = 60.0) -> None:
    """A Depth Pro with a FOV head whose output is exactly ``fov_deg`` (its last layer zeroed)."""
    import torch
    from transformers import DepthProConfig, DepthProForDepthEstimation

    dino = {
        "model_type": "dinov2",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "patch_size": 7,
        "image_size": 28,
    }
    config = DepthProConfig(
        patch_size=28,
        image_model_config=dict(dino),
        patch_model_config=dict(dino),
        fov_model_config=dict(dino),
        fusion_hidden_size=16,
        intermediate_hook_ids=[1, 0],
        intermediate_feature_dims=[16, 16],
        scaled_images_ratios=[0.5, 1],
        scaled_images_overlap_ratios=[0.0, 0.5],
        scaled_images_feature_dims=[32, 32],
        use_fov_model=True,
        merge_padding_value=1,
        num_fov_head_layers=1,
    )
    torch.manual_seed(0)
    model = DepthProForDepthEstimation(config)
    last = [m for m in model.fov_model.modules() if isinstance(m, torch.nn.Conv2d)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.fill_(fov_deg)
    model.save_pretrained(directory)
    _write_preprocessing(directory, 56, 56, IMAGE_MEAN, IMAGE_MEAN)


def build_depth_anything(directory: Path) -> None:
    """A metric Depth Anything V2 with a two-layer DINOv2 backbone and its (PIL) processor."""
    import torch
    from transformers import DepthAnythingConfig, DepthAnythingForDepthEstimation, Dinov2Config
    from transformers.models.dpt.image_processing_pil_dpt import DPTImageProcessorPil

    backbone = Dinov2Config(
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=64,
        patch_size=14,
        image_size=28,
        out_features=["stage1", "stage2", "stage3", "stage4"],
        reshape_hidden_states=False,
    )
    config = DepthAnythingConfig(
        backbone_config=backbone,
        neck_hidden_sizes=[8, 16, 32, 32],
        reassemble_hidden_size=32,
        fusion_hidden_size=16,
        head_hidden_size=8,
        depth_estimation_type="metric",
        max_depth=20,
    )
    torch.manual_seed(0)
    DepthAnythingForDepthEstimation(config).save_pretrained(directory)
    DPTImageProcessorPil(
        size={"height": 28, "width": 28}, keep_aspect_ratio=True, ensure_multiple_of=14
    ).save_pretrained(directory)


def build_sam(directory: Path, blind: bool = False) -> None:
    """A SAM with a 64-pixel image encoder and its processor; ``blind``: every mask logit is 0 (empty)."""
    import torch
    from transformers import SamConfig, SamModel, SamProcessor
    from transformers.models.sam.image_processing_pil_sam import SamImageProcessorPil

    config = SamConfig(
        vision_config={
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "mlp_dim": 64,
            "image_size": 64,
            "patch_size": 16,
            "output_channels": 32,
            "window_size": 2,
            "global_attn_indexes": [1],
            "num_pos_feats": 16,
        },
        prompt_encoder_config={
            "hidden_size": 32,
            "image_size": 64,
            "patch_size": 16,
            "image_embedding_size": 4,
        },
        mask_decoder_config={
            "hidden_size": 32,
            "mlp_dim": 64,
            "num_attention_heads": 2,
            "iou_head_hidden_dim": 32,
        },
    )
    torch.manual_seed(0)
    model = SamModel(config)
    if blind:  # a zero upscaled embedding makes every mask logit 0, i.e. an empty mask
        with torch.no_grad():
            model.mask_decoder.upscale_conv2.weight.zero_()
            model.mask_decoder.upscale_conv2.bias.zero_()
    model.save_pretrained(directory)
    processor = SamImageProcessorPil(
        size={"longest_edge": 64}, pad_size={"height": 64, "width": 64}, mask_size={"longest_edge": 16}
    )
    SamProcessor(image_processor=processor).save_pretrained(directory)


def build_sam2(directory: Path) -> None:
    """A SAM 2 with a four-stage Hiera of 64-pixel input."""
    import torch
    from transformers import Sam2Config, Sam2Model

    config = Sam2Config(
        vision_config={
            "backbone_config": {
                "model_type": "sam2_hiera_det_model",
                "image_size": [64, 64],
                "hidden_size": 8,
                "blocks_per_stage": [1, 1, 2, 1],
                "embed_dim_per_stage": [8, 16, 32, 64],
                "num_attention_heads_per_stage": [1, 1, 2, 2],
                "window_size_per_stage": [4, 4, 2, 2],
                "global_attention_blocks": [3],
                "window_positional_embedding_background_size": [2, 2],
            },
            "backbone_channel_list": [64, 32, 16, 8],
            "backbone_feature_sizes": [[16, 16], [8, 8], [4, 4]],
            "fpn_hidden_size": 32,
        },
        prompt_encoder_config={"hidden_size": 32, "image_size": 64, "patch_size": 16},
        mask_decoder_config={
            "hidden_size": 32,
            "mlp_dim": 64,
            "num_attention_heads": 2,
            "iou_head_hidden_dim": 32,
        },
    )
    torch.manual_seed(0)
    Sam2Model(config).save_pretrained(directory)
    _write_preprocessing(directory, 64, 64, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def _write_preprocessing(directory: Path, height: int, width: int, mean: tuple, std: tuple) -> None:
    """The ``preprocessor_config.json`` keys transformers writes for a fixed-size processor."""
    config = {
        "size": {"height": height, "width": width},
        "image_mean": mean,
        "image_std": std,
        "rescale_factor": 1 / 255,
    }
    (directory / "preprocessor_config.json").write_text(json.dumps(config))
