"""The model's text -> an OpenEnv action, for every text (property tests over the schema kinds)."""

from __future__ import annotations

import enum
import json
from typing import Annotated, Any, Literal, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openenv.core.env_server.types import Action
from pydantic import BaseModel, Field, ValidationError, create_model

from gem_core.errors import ActionSchemaError, InvalidAction
from gem_openenv.client import ActionFormat, error_code


class Move(Action):
    op: Literal["add", "sub"]
    amount: int = Field(ge=0, le=9)


class Say(Action):
    message: str


MOVE = ActionFormat(Move.model_json_schema())
SAY = ActionFormat(Say.model_json_schema())


def fits(value: object) -> bool:
    """The ground truth: OpenEnv's own model accepts it (what its server would validate)."""
    try:
        Move.model_validate(value)
    except ValidationError:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_a_one_field_action_takes_any_text_verbatim(text: str) -> None:
    assert SAY.text_field == "message"
    assert SAY.build(text) == {"message": text}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-20, 20) | st.sampled_from(["add", "sub", "x"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["op", "amount", "z"]), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(json_values, st.booleans())
def test_json_text_is_accepted_exactly_when_the_model_accepts_it(value: object, fenced: bool) -> None:
    text = json.dumps(value)
    text = f"```json\n{text}\n```" if fenced else text
    if fits(value):
        assert MOVE.build(text) == value
    else:
        with pytest.raises(ActionSchemaError) as caught:
            MOVE.build(text)
        assert '"op": "one of add|sub"' in str(caught.value) and "required: op, amount" in str(caught.value)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80))
def test_any_text_either_fits_or_is_an_error_naming_the_schema(text: str) -> None:
    try:
        value = MOVE.build(text)
    except ActionSchemaError as exc:
        assert isinstance(exc, InvalidAction) and "this env's action is a JSON object" in str(exc)
    else:
        assert fits(value)


def test_the_example_action_fits() -> None:
    assert fits(json.loads(MOVE.example()))
    assert SAY.build(SAY.example()) == {"message": SAY.example()}


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("Server error: boom (code: EXECUTION_ERROR)", "EXECUTION_ERROR"),
        ("Server error: Server at capacity (2/2) (code: CAPACITY_REACHED)", "CAPACITY_REACHED"),
        ("something else", None),
    ],
    ids=["execution", "capacity", "none"],
)
def test_error_code(message: str, code: str | None) -> None:
    assert error_code(RuntimeError(message)) == code


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(BaseModel):
    x: int
    y: int = 0


#: Field kinds an OpenEnv action declares, by name.
FIELD_KINDS: dict[str, Any] = {
    "str": str,
    "short-str": Annotated[str, Field(max_length=3)],
    "optional-str": Optional[str],
    "literal": Literal["go", "stop"],
    "enum": Colour,
    "int": int,
    "bounded-float": Annotated[float, Field(ge=0, le=1)],
    "bool": bool,
    "nested": Point,
    "list": list[int],
}


@st.composite
def action_models(draw: st.DrawFn) -> type[Action]:
    names = draw(st.lists(st.sampled_from(sorted(FIELD_KINDS)), min_size=1, max_size=3, unique=True))
    required = draw(st.lists(st.booleans(), min_size=len(names), max_size=len(names)))
    fields: dict[str, Any] = {}
    for name, needed in zip(names, required, strict=True):
        annotation = FIELD_KINDS[name]  # an optional field: Optional[...] = None, the shape pydantic users write
        fields[name.replace("-", "_")] = (annotation, ...) if needed else (Optional[annotation], None)
    return create_model("Drawn", __base__=Action, **fields)


def accepts(model: type[Action], value: object) -> bool:
    try:
        model.model_validate(value)
    except ValidationError:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(action_models(), st.text(max_size=12) | st.sampled_from(["go", "red", '{"x": 1}', '{"nested": {"x": 2}}']))
def test_any_action_schema_builds_only_what_the_model_accepts(model: type[Action], text: str) -> None:
    """Nested objects, enums, optional and non-string fields: raw text iff one string-taking field, and the
    built action always validates (OpenEnv's own model is the judge); otherwise an error naming the schema."""
    schema = model.model_json_schema()
    action = ActionFormat(schema)
    fields = [f for f in model.model_fields if f != "metadata"]
    takes_text = len(fields) == 1 and "string" in action._kinds(schema["properties"][fields[0]])
    assert (action.text_field is not None) == takes_text
    assert accepts(model, json.loads(action.example()) if action.text_field is None else {fields[0]: action.example()})
    try:
        built = action.build(text)
    except ActionSchemaError as exc:
        assert "this env's action is" in str(exc) and all(f in str(exc) for f in fields)
    else:
        assert accepts(model, built)
        if action.text_field is not None:
            assert built == {action.text_field: text}  # verbatim
