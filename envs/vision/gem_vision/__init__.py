r"""gem-vision: offline visual reasoning envs for gem, registered as ``vision:<Name>-v0``.

Observations are :class:`gem_core.multimodal.Content` (text and a PNG drawn with Pillow);
actions are text with the answer in ``\\boxed{...}``. See ``docs/multimodal.md``.
"""

__version__ = "0.1.0"
