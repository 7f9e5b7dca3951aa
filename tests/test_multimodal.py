"""gem_core.multimodal: images in observations through check_env, wrappers, vector envs, the engine, traces."""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.core import Env, ResetReturn, StepReturn, enforce_episode_order
from gem_core.errors import EnvCheckError, ImageError
from gem_core.multimodal import (
    Content,
    Image,
    add_text,
    images_from_json,
    images_to_json,
    message_images,
    message_text,
    openai_content,
)


def png(width: int = 3, height: int = 2, rgb: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    """A real, decodable PNG written with zlib alone (no imaging library in gem_core's tests)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def jpeg_header(width: int = 5, height: int = 7) -> bytes:
    """The head of a baseline JPEG: SOI, an APP0 (JFIF) segment, then SOF0 with the size."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


# ---------------------------------------------------------------------------------------- Image


@pytest.mark.parametrize(
    ("data", "fmt", "size"),
    [(png(3, 2), "png", (3, 2)), (png(17, 40), "png", (17, 40)), (jpeg_header(5, 7), "jpeg", (5, 7))],
    ids=["png-3x2", "png-17x40", "jpeg-5x7"],
)
def test_format_and_size_come_from_the_bytes(data: bytes, fmt: str, size: tuple[int, int]) -> None:
    image = Image.from_bytes(data)
    assert (image.format, image.size) == (fmt, size)
    assert image.mime_type == f"image/{fmt}"
    assert image.data_url().startswith(f"data:image/{fmt};base64,")


@pytest.mark.parametrize(
    "data",
    [b"", b"GIF89a\x01\x00", b"hello world", b"\x89PNG\r\n\x1a\n", png()[:20], b"\xff\xd8\xff\xe0\x00"],
    ids=["empty", "gif", "text", "png-magic-only", "png-cut-header", "jpeg-without-frame"],
)
def test_bytes_that_are_no_usable_image_raise_image_error(data: bytes) -> None:
    with pytest.raises(ImageError):
        Image.from_bytes(data)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=64), st.sampled_from([b"", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff"]))
def test_any_bytes_give_an_image_or_an_image_error(tail: bytes, head: bytes) -> None:
    # the class of bad inputs: whatever follows the magic, nothing but ImageError escapes
    try:
        image = Image.from_bytes(head + tail)
    except ImageError:
        return
    assert image.format in ("png", "jpeg")


def test_a_path_image_takes_its_format_from_the_file_not_its_name(tmp_path: Path) -> None:
    misnamed = tmp_path / "photo.jpg"
    misnamed.write_bytes(png(4, 4))
    image = Image.from_path(misnamed)
    assert image.format == "png" and image.size == (4, 4) and image.read() == png(4, 4)
    assert image == Image.from_bytes(png(4, 4))  # equal by content


@pytest.mark.parametrize("case", ["missing", "not-an-image"])
def test_a_bad_path_raises_image_error_naming_the_file(tmp_path: Path, case: str) -> None:
    path = tmp_path / "x.png"
    if case == "not-an-image":
        path.write_text("plain text")
    with pytest.raises(ImageError, match="x.png"):
        Image.from_path(path)


def test_image_holds_exactly_one_of_bytes_or_path() -> None:
    with pytest.raises(ImageError):
        Image(format="png")
    with pytest.raises(ImageError):
        Image(format="gif", data=b"x")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- Content


def test_content_keeps_parts_in_order_and_reads_as_text() -> None:
    image = Image.from_bytes(png())
    content = Content("Find x.", image, ["", "Answer in \\boxed{}."])
    assert content.parts == ("Find x.", image, "Answer in \\boxed{}.")
    assert content.images == (image,)
    assert str(content) == "Find x.<image>Answer in \\boxed{}."
    assert content.message_content()[1] == {"type": "image", "image": image}
    wire = content.openai_parts()
    assert wire[1]["type"] == "image_url" and wire[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert pickle.loads(pickle.dumps(content)) == content


@pytest.mark.parametrize("bad", [b"\x89PNG", 3, {"type": "image"}], ids=["raw-bytes", "int", "dict"])
def test_content_refuses_parts_that_are_no_text_or_image(bad: Any) -> None:
    with pytest.raises(ImageError, match="Image.from_bytes"):
        Content("x", bad)


def test_add_text_keeps_images_where_they_are() -> None:
    image = Image.from_bytes(png())
    assert add_text("a", before="<", after=">") == "<a>"
    joined = add_text(Content("q", image), before="tool says hi\n\n", after="\n\nTools: ...")
    assert isinstance(joined, Content) and joined.images == (image,)
    assert str(joined) == "tool says hi\n\nq<image>\n\nTools: ..."


def test_json_round_trip_inlines_images() -> None:
    image = Image.from_bytes(jpeg_header())
    value = {"obs": Content("a", image), "messages": [{"role": "user", "content": [{"type": "image", "image": image}]}]}
    encoded = json.loads(json.dumps(images_to_json(value)))
    assert images_from_json(encoded) == value
    with pytest.raises(ImageError):
        images_from_json({"$image": {"format": "png"}})


def test_message_helpers() -> None:
    image = Image.from_bytes(png())
    content = Content("see", image).message_content()
    assert message_images(content) == [image] and message_images("text") == []
    assert message_text(content) == "see<image>"
    assert openai_content("plain") == "plain"
    assert openai_content(content)[1]["type"] == "image_url"


# ---------------------------------------------------------------------------------------- an image env


class PictureEnv(Env):
    """Shows a picture with the task; ``"red"`` wins. The picture's colour depends on the seed."""

    metadata = {"multi_turn": True}

    def __init__(self, broken: str | None = None) -> None:
        self.broken = broken
        self.turn = 0

    def _picture(self) -> Image:
        colour = (int(self.np_random.integers(256)), 0, 0)
        return Image.from_bytes(png(4, 3, colour))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self.turn = 0
        if self.broken == "wrong-type":
            return [{"type": "text", "text": "hi"}], {}  # type: ignore[return-value]
        if self.broken == "empty":
            return Content(), {}
        return Content("What colour is this?", self._picture()), {}

    def step(self, action: str) -> StepReturn:
        self.turn += 1
        won = action.strip() == "red"
        done = won or self.turn >= 3
        return Content("Not quite. Again:", self._picture()), float(won), won, done and not won, {"success": won}

    def sample_random_action(self) -> str:
        return str(self.py_random.choice(["red", "blue"]))


def test_check_env_accepts_an_image_env() -> None:
    from gem_core.testing import check_env

    check_env(enforce_episode_order(PictureEnv()), env_factory=lambda: enforce_episode_order(PictureEnv()))


@pytest.mark.parametrize("broken", ["wrong-type", "empty"])
def test_check_env_names_a_bad_multimodal_observation(broken: str) -> None:
    from gem_core.testing import check_env

    with pytest.raises(EnvCheckError, match="Content"):
        check_env(enforce_episode_order(PictureEnv(broken)))


def test_check_env_catches_a_path_image_whose_file_is_gone(tmp_path: Path) -> None:
    from gem_core.testing import check_env

    path = tmp_path / "p.png"
    path.write_bytes(png())
    image = Image.from_path(path)
    os.remove(path)

    class GoneEnv(PictureEnv):
        def _picture(self) -> Image:
            return image

    with pytest.raises(EnvCheckError, match="unusable image"):
        check_env(enforce_episode_order(GoneEnv()))


def test_chat_history_and_tool_wrapper_carry_images() -> None:
    from gem_core.wrappers.chat import ChatHistory

    env = ChatHistory(PictureEnv(), mode="chat")
    obs, info = env.reset(seed=1)
    assert isinstance(obs, Content)
    first = info["messages"][0]["content"]
    assert message_images(first) == list(obs.images)
    _, _, _, _, info = env.step("blue")
    assert [m["role"] for m in info["messages"]] == ["user", "assistant", "user"]
    assert len(message_images(info["messages"][2]["content"])) == 1
    text_view = ChatHistory(PictureEnv(), mode="observation")
    shown, _ = text_view.reset(seed=1)
    assert shown == "What colour is this?<image>"


@pytest.mark.parametrize("backend", ["sync", "async", "process"])
def test_vector_envs_carry_images(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from gem_core.api import register
    from gem_core.vector import make_vec

    # the process backend's workers import the env by its module name: the repo root on their path
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    register("test:Picture-v0", f"{__name__}:PictureEnv")
    vec = make_vec("test:Picture-v0", 2, backend=backend)
    try:
        obs, _ = vec.reset(seed=5)
        assert all(isinstance(o, Content) and len(o.images) == 1 for o in obs)
        assert obs[0] != obs[1]  # different seeds, different pictures
        again, *_ = vec.step(["blue", "red"])
        assert all(isinstance(o, Content) for o in again)
    finally:
        vec.close()


# ---------------------------------------------------------------------------------------- the engine


def test_message_mode_keeps_image_parts_and_the_record_round_trips() -> None:
    from gem_core.episode import EpisodeEngine
    from gem_core.rl.types import Episode

    engine = EpisodeEngine(max_turns=3)
    seen: list[list[Image]] = []

    def generate(requests: list[Any]) -> list[str]:
        seen.append([image for m in requests[0].messages for image in message_images(m["content"])])
        return ["blue"]

    from gem_core.episode import EpisodeJob

    (session,) = engine.play_batch([EpisodeJob(PictureEnv(), env_id="test:Picture-v0", seed=2)], generate)
    assert [len(s) for s in seen] == [1, 2, 3]  # every earlier image stays in the history
    episode = session.episode()
    assert isinstance(episode.turns[0].observation, Content)
    back = Episode.from_json(episode.to_json())
    assert back.turns[1].observation == episode.turns[1].observation
    assert back.turns[2].next_observation == episode.turns[2].next_observation


def test_token_mode_with_a_text_tokenizer_refuses_images_by_name() -> None:
    from gem_core.episode import EpisodeEngine, EpisodeJob
    from gem_core.testing_tokenizers import build_chat_tokenizer

    engine = EpisodeEngine(build_chat_tokenizer(), on_env_error="raise")
    with pytest.raises(ImageError, match="processor="):
        engine.play_batch([EpisodeJob(PictureEnv(), seed=0)], lambda rs: [])


# ---------------------------------------------------------------------------------------- traces and gem view


def test_a_trace_stores_each_image_once_and_gem_view_shows_it(tmp_path: Path) -> None:
    from gem_core.cli import main
    from gem_core.eval.traces import TraceWriter, image_folder, load_images, read_trace

    shared = Image.from_bytes(png(6, 5))
    own = Image.from_bytes(jpeg_header(9, 8))
    trace = tmp_path / "run.jsonl"
    records = [
        {
            "env_id": "test:Picture-v0",
            "seed": seed,
            "episode_return": 0.0,
            "success": False,
            "num_turns": 1,
            "completion_tokens": 1,
            "messages": [
                {"role": "user", "content": Content("look", shared, *([own] if seed else [])).message_content()},
                {"role": "assistant", "content": "blue"},
            ],
            "turns": [{"action": "blue", "reward": 0.0, "stop_reason": "stop"}],
        }
        for seed in range(3)
    ]
    with TraceWriter(str(trace)) as writer:
        for record in records:
            writer.write(record)
    stored = sorted(os.listdir(image_folder(trace)))
    assert stored == sorted([f"{shared.sha256}.png", f"{own.sha256}.jpeg"])
    text = trace.read_text()
    assert text.count(shared.sha256) == 3 and text.count(own.sha256) == 2  # references, one per use
    assert base64.b64encode(shared.read()).decode()[:24] not in text  # never the bytes themselves
    back = [load_images(r, trace) for r in read_trace(trace)]
    assert message_images(back[1]["messages"][0]["content"]) == [shared, own]

    out = io.StringIO()
    rc = main(["view", str(trace), "--seed", "1"], stdout=out)
    text = out.getvalue()
    assert rc == 0
    assert f"[image png 6x5 sha256:{shared.sha256[:12]}" in text
    assert f"[image jpeg 9x8 sha256:{own.sha256[:12]}" in text

    os.remove(os.path.join(image_folder(trace), f"{own.sha256}.jpeg"))
    with pytest.raises(ImageError):
        load_images(read_trace(trace)[1], trace)


def test_a_tampered_image_file_is_caught_by_its_hash(tmp_path: Path) -> None:
    from gem_core.eval.traces import TraceWriter, image_folder, load_images, read_trace

    image = Image.from_bytes(png(2, 2))
    trace = tmp_path / "t.jsonl"
    record = {
        "env_id": "e:X-v0",
        "seed": 0,
        "episode_return": 0.0,
        "success": False,
        "num_turns": 0,
        "completion_tokens": 0,
        "messages": [{"role": "user", "content": Content(image).message_content()}],
    }
    with TraceWriter(str(trace)) as writer:
        writer.write(record)
    Path(image_folder(trace), f"{image.sha256}.png").write_bytes(png(3, 3))
    with pytest.raises(ImageError, match="do not match"):
        load_images(read_trace(trace)[0], trace)


def test_tool_wrapper_keeps_images_in_instructions_and_answers() -> None:
    from gem_core.tools import ToolEnvWrapper
    from tests.tools.test_wrapper import EchoTool

    env = ToolEnvWrapper(
        enforce_episode_order(PictureEnv()), [EchoTool()], answer_pattern="red", answer_with_calls="both"
    )
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, Content) and len(obs.images) == 1 and "<echo>" in obs.text
    obs, *_ = env.step("<echo>hm</echo> red")
    assert isinstance(obs, Content) and len(obs.images) == 1 and obs.text.startswith("<tool_response")
    env.close()


def test_gem_view_keeps_each_image_header_on_one_line_whatever_the_folder_path(tmp_path: Path) -> None:
    # A long trace folder once wrapped "[image jpeg 9x8 ..." across two lines of the panel.
    from gem_core.eval.report import print_episode

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    first, second = Image.from_bytes(png(6, 5)), Image.from_bytes(jpeg_header(9, 8))
    for image in (first, second):
        (deep / f"{image.sha256}.{image.format}").write_bytes(image.read())
    refs = [{"type": "image", "image": {"$image": {"format": i.format, "sha256": i.sha256}}} for i in (first, second)]
    record = {
        "env_id": "test:Picture-v0",
        "seed": 0,
        "episode_return": 0.0,
        "num_turns": 0,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "look " * 30}, *refs]}],
    }
    out = io.StringIO()
    print_episode(record, out, image_folder=str(deep))
    text = out.getvalue()
    assert f"[image png 6x5 sha256:{first.sha256[:12]}" in text
    assert f"[image jpeg 9x8 sha256:{second.sha256[:12]}" in text
