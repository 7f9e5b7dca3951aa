"""Observations with images: :class:`Image` (encoded bytes or a file, PNG or JPEG) and :class:`Content`.

An observation is either a plain ``str`` (every text env, unchanged) or a :class:`Content`:
an ordered tuple of parts, each a ``str`` or an :class:`Image`. In chat messages a
:class:`Content` becomes a list of content parts in the OpenAI shape::

    [{"type": "text", "text": "Find x."}, {"type": "image", "image": Image(...)}]

``{"type": "image", "image": ...}`` is what Hugging Face chat templates (Qwen2-VL,
LLaVA, Gemma 3) render as the model's image placeholder; :meth:`Content.openai_parts`
gives the wire form an OpenAI-compatible server takes (``image_url`` with a data URL).

gem_core never decodes pixels (no imaging library is needed): an image's format is read
from its magic bytes and its size from its header. Decoding is left to whoever needs
pixels: the model's processor (:mod:`gem_core.vision`) or the env package that drew it.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from gem_core.errors import ImageError

__all__ = [
    "IMAGE_FORMATS",
    "Content",
    "Image",
    "ImageFormat",
    "Observation",
    "add_text",
    "detect_format",
    "has_images",
    "image_size",
    "images_from_json",
    "images_to_json",
    "is_observation",
    "message_images",
    "message_text",
    "observation_images",
    "observation_text",
    "openai_content",
    "to_message_content",
]

ImageFormat = Literal["png", "jpeg"]

#: Formats gem_core takes, with their MIME types.
IMAGE_FORMATS: dict[str, str] = {"png": "image/png", "jpeg": "image/jpeg"}

_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8\xff"
#: What a text-only view shows in place of an image.
IMAGE_PLACEHOLDER = "<image>"


def detect_format(head: bytes) -> ImageFormat:
    """The format of encoded image bytes, from their magic number.

    Raises:
        ImageError: Neither PNG nor JPEG; the message names the bytes seen.
    """
    if head.startswith(_PNG_MAGIC):
        return "png"
    if head.startswith(_JPEG_MAGIC):
        return "jpeg"
    raise ImageError(
        f"not a PNG or JPEG image (the first bytes are {head[:8]!r}); encode the image as PNG or JPEG "
        "(e.g. Pillow's image.save(buffer, format='PNG'))"
    )


def image_size(data: bytes, fmt: ImageFormat) -> tuple[int, int]:
    """``(width, height)`` read from a PNG's IHDR chunk or a JPEG's start-of-frame marker.

    Raises:
        ImageError: The header is cut or malformed.
    """
    if fmt == "png":
        if len(data) < 24 or data[12:16] != b"IHDR":
            raise ImageError("a PNG without its IHDR header (the bytes are cut or corrupt)")
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            break
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        # start-of-frame markers (baseline, progressive, ...), not DHT/JPG/DAC
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if at + 9 > len(data):
                break
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return int(width), int(height)
        at += 2 + length
    raise ImageError("a JPEG without a start-of-frame header (the bytes are cut or corrupt)")


@dataclass(frozen=True, eq=False)
class Image:
    """One image of an observation: encoded bytes (PNG or JPEG), or a file holding them.

    Build one with :meth:`from_bytes` or :meth:`from_path`; both read the format from the
    magic bytes (a file's extension is not trusted) and check the header. Two images are
    equal when their bytes are (:attr:`sha256`).

    Attributes:
        format: ``"png"`` or ``"jpeg"``.
        data: The encoded bytes; ``None`` for a path image until :meth:`read`.
        path: The file, for a path image (read when the bytes are needed).
    """

    format: ImageFormat
    data: bytes | None = None
    path: str | None = None
    _digest: list[str] = field(default_factory=list, repr=False)  # filled on first use (frozen otherwise)

    def __post_init__(self) -> None:
        if self.format not in IMAGE_FORMATS:
            raise ImageError(f"image format must be one of {sorted(IMAGE_FORMATS)}, got {self.format!r}")
        if (self.data is None) == (self.path is None):
            raise ImageError("an Image holds either encoded bytes (data=...) or a file (path=...), exactly one")
        if self.data is not None and not isinstance(self.data, bytes):
            raise ImageError(f"Image data must be bytes, got {type(self.data).__name__}")

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Image:
        """An image from encoded bytes; the format comes from the magic bytes.

        Raises:
            ImageError: Not bytes, not PNG/JPEG, or a broken header.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ImageError(f"Image.from_bytes takes encoded bytes, got {type(data).__name__}")
        raw = bytes(data)
        fmt = detect_format(raw)
        image_size(raw, fmt)
        return cls(format=fmt, data=raw)

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> Image:
        """An image kept as a file path; the format comes from the file's magic bytes.

        Raises:
            ImageError: The file is missing or unreadable, or is not PNG/JPEG.
        """
        name = os.fspath(path)
        try:
            with open(name, "rb") as handle:
                head = handle.read(64 * 1024)  # enough for a PNG header and most JPEG headers
        except OSError as exc:
            raise ImageError(f"cannot read image file {name!r}: {exc.strerror or exc}") from None
        try:
            fmt = detect_format(head)
        except ImageError as exc:
            raise ImageError(f"{name}: {exc}") from None
        return cls(format=fmt, path=name)

    def read(self) -> bytes:
        """The encoded bytes (read from the file for a path image).

        Raises:
            ImageError: The file is gone or changed to something that is not this format.
        """
        if self.data is not None:
            return self.data
        assert self.path is not None
        try:
            with open(self.path, "rb") as handle:
                raw = handle.read()
        except OSError as exc:
            raise ImageError(f"cannot read image file {self.path!r}: {exc.strerror or exc}") from None
        if detect_format(raw) != self.format:
            raise ImageError(f"{self.path}: the file is no longer a {self.format} image")
        return raw

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of the encoded bytes: the image's identity (traces store each image once by it)."""
        if not self._digest:
            self._digest.append(hashlib.sha256(self.read()).hexdigest())
        return self._digest[0]

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)`` from the header (no decoding)."""
        return image_size(self.read(), self.format)

    @property
    def mime_type(self) -> str:
        """``image/png`` or ``image/jpeg``."""
        return IMAGE_FORMATS[self.format]

    def data_url(self) -> str:
        """A ``data:`` URL of the bytes (what OpenAI-compatible servers take in ``image_url``)."""
        return f"data:{self.mime_type};base64,{base64.b64encode(self.read()).decode('ascii')}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Image):
            return NotImplemented
        return self.format == other.format and self.sha256 == other.sha256

    def __hash__(self) -> int:
        return hash(self.sha256)

    def __repr__(self) -> str:
        where = f"path={self.path!r}" if self.path is not None else f"{len(self.data or b'')} bytes"
        return f"Image({self.format}, {where})"

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (process and Ray vector envs) without the cached digest list
        return (Image, (self.format, self.data, self.path))


Part = Union[str, Image]


class Content(Sequence[Part]):
    """A multimodal observation: text and image parts, in order.

    ``Content("Find x.", image)`` or ``Content(["Find x.", image])``. Adjacent text parts
    are kept as given; empty strings are dropped. ``str(content)`` is its text with
    ``<image>`` in place of each image, so code that only reads text keeps working.

    Raises:
        ImageError: A part is neither ``str`` nor :class:`Image`.
    """

    __slots__ = ("_parts",)

    def __init__(self, *parts: Part | Iterable[Part]) -> None:
        flat: list[Any] = []
        for part in parts:
            if isinstance(part, (str, Image)):
                flat.append(part)
            elif isinstance(part, Iterable) and not isinstance(part, (bytes, Mapping)):
                flat.extend(part)
            else:
                flat.append(part)
        for part in flat:
            if not isinstance(part, (str, Image)):
                raise ImageError(
                    f"a Content part must be str or gem_core.multimodal.Image, got {type(part).__name__}; "
                    "wrap encoded bytes with Image.from_bytes(...) and files with Image.from_path(...)"
                )
        self._parts: tuple[Part, ...] = tuple(p for p in flat if not (isinstance(p, str) and p == ""))

    @property
    def parts(self) -> tuple[Part, ...]:
        """The parts, in order."""
        return self._parts

    @property
    def images(self) -> tuple[Image, ...]:
        """The image parts, in order."""
        return tuple(p for p in self._parts if isinstance(p, Image))

    @property
    def text(self) -> str:
        """The text parts joined (images left out)."""
        return "".join(p for p in self._parts if isinstance(p, str))

    def message_content(self) -> list[dict[str, Any]]:
        """The parts as chat content parts: ``{"type": "text", ...}`` and ``{"type": "image", "image": Image}``."""
        return [
            {"type": "text", "text": p} if isinstance(p, str) else {"type": "image", "image": p} for p in self._parts
        ]

    def openai_parts(self) -> list[dict[str, Any]]:
        """The parts as the OpenAI chat API takes them (images as ``image_url`` data URLs)."""
        return [
            {"type": "text", "text": p}
            if isinstance(p, str)
            else {"type": "image_url", "image_url": {"url": p.data_url()}}
            for p in self._parts
        ]

    def __len__(self) -> int:
        return len(self._parts)

    def __getitem__(self, index: Any) -> Any:
        return self._parts[index]

    def __iter__(self) -> Iterator[Part]:
        return iter(self._parts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Content):
            return NotImplemented
        return self._parts == other._parts

    def __hash__(self) -> int:
        return hash(self._parts)

    def __str__(self) -> str:
        return "".join(p if isinstance(p, str) else IMAGE_PLACEHOLDER for p in self._parts)

    def __repr__(self) -> str:
        return f"Content({', '.join(repr(p) for p in self._parts)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Content, self._parts)


#: What ``reset`` and ``step`` return as the observation: text, or text and images.
Observation = Union[str, Content]


def is_observation(value: object) -> bool:
    """Whether ``value`` is an observation (``str`` or :class:`Content`)."""
    return isinstance(value, (str, Content))


def observation_text(obs: Observation) -> str:
    """The text of an observation, ``<image>`` in place of each image (``str`` unchanged)."""
    return obs if isinstance(obs, str) else str(obs)


def add_text(obs: Observation, *, before: str = "", after: str = "") -> Observation:
    """``obs`` with text added before and after it; a :class:`Content` keeps its images where they are."""
    if isinstance(obs, str):
        return f"{before}{obs}{after}"
    return Content(before, *obs.parts, after)


def observation_images(obs: Observation) -> tuple[Image, ...]:
    """The images of an observation (none for a ``str``)."""
    return () if isinstance(obs, str) else obs.images


def to_message_content(obs: Observation) -> str | list[dict[str, Any]]:
    """A chat message's ``content`` for an observation: the ``str`` itself, or content parts."""
    return obs if isinstance(obs, str) else obs.message_content()


def message_images(content: Any) -> list[Image]:
    """The images of a message's ``content`` (a ``str`` has none), in order."""
    if isinstance(content, str) or content is None:
        return []
    return [part["image"] for part in content if isinstance(part, Mapping) and isinstance(part.get("image"), Image)]


def openai_content(content: Any) -> Any:
    """A message's ``content`` as the OpenAI chat API takes it: image parts become ``image_url`` data URLs."""
    if isinstance(content, str) or not has_images(content):
        return content
    return [
        {"type": "image_url", "image_url": {"url": part["image"].data_url()}}
        if isinstance(part, Mapping) and isinstance(part.get("image"), Image)
        else part
        for part in content
    ]


def message_text(content: Any) -> str:
    """A message's ``content`` as text: a ``str`` itself, parts joined with ``<image>`` for each image."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    pieces = []
    for part in content:
        if isinstance(part, Mapping) and part.get("type") == "text":
            pieces.append(str(part.get("text", "")))
        elif isinstance(part, Mapping) and part.get("type") in ("image", "image_url"):
            pieces.append(IMAGE_PLACEHOLDER)
        else:
            pieces.append(str(part))
    return "".join(pieces)


def images_to_json(value: Any, store: Callable[[Image], dict[str, Any]] | None = None) -> Any:
    """``value`` with every :class:`Image` and :class:`Content` in it made JSON-ready (dicts and lists walked).

    An image becomes ``{"$image": {...}}``: by default its format and base64 bytes inline;
    ``store(image)`` may return another reference (a trace's ``{"format", "sha256"}``). A
    :class:`Content` becomes ``{"$content": [parts]}``. :func:`images_from_json` reverses it.
    """
    if isinstance(value, Image):
        ref = store(value) if store is not None else {"format": value.format, "data": _b64(value.read())}
        return {"$image": ref}
    if isinstance(value, Content):
        return {"$content": [images_to_json(p, store) for p in value.parts]}
    if isinstance(value, Mapping):
        return {k: images_to_json(v, store) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or (isinstance(value, Sequence) and not isinstance(value, (str, bytes))):
        return [images_to_json(v, store) for v in value]
    return value


def images_from_json(value: Any, load: Callable[[dict[str, Any]], Image] | None = None) -> Any:
    """Reverse :func:`images_to_json`; ``load(ref)`` resolves references a ``store`` wrote.

    Raises:
        ImageError: An inline image whose bytes are not base64 PNG/JPEG.
    """
    if isinstance(value, Mapping):
        if set(value) == {"$image"}:
            ref = dict(value["$image"])
            if load is not None:
                return load(ref)
            try:
                raw = base64.b64decode(ref["data"], validate=True)
            except (KeyError, TypeError, ValueError):
                raise ImageError(f"an inline image record needs base64 'data', got keys {sorted(ref)}") from None
            return Image.from_bytes(raw)
        if set(value) == {"$content"}:
            return Content([images_from_json(p, load) for p in value["$content"]])
        return {k: images_from_json(v, load) for k, v in value.items()}
    if isinstance(value, list):
        return [images_from_json(v, load) for v in value]
    return value


def has_images(value: Any) -> bool:
    """Whether an :class:`Image` sits anywhere in ``value`` (dicts, lists, tuples, :class:`Content` walked)."""
    if isinstance(value, Image):
        return True
    if isinstance(value, Content):
        return bool(value.images)
    if isinstance(value, Mapping):
        return any(has_images(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_images(v) for v in value)
    return False


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
