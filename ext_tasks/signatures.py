"""A function's parameters as the protocol sees them: which one takes the :class:`~.context.Context`,
and a pydantic model of the rest, which gives the published JSON schema and validates arguments before
the function runs (invalid ones answer -32602)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from .context import Context
from .protocol.errors import InvalidParams
from .protocol.wire import describe_validation_error

Fn = Callable[..., Awaitable[Any]]


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="ignore")


@dataclass
class Signature:
    """A function's parameters: which one takes the Context, and a pydantic model for the rest."""

    context_param: str | None
    model: type[BaseModel]
    accepts_any_keyword: bool = False
    #: The model's field names, read once: pydantic's ``model_fields`` costs ~3 µs a read.
    field_names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.field_names = tuple(self.model.model_fields)

    @classmethod
    def of(cls, fn: Fn, *, raw_schema: bool = False) -> Signature:
        hints = get_type_hints(fn, include_extras=True)
        context_param = None
        accepts_any_keyword = False
        fields: dict[str, Any] = {}
        for name, param in inspect.signature(fn).parameters.items():
            annotation = hints.get(name, Any)
            if annotation is Context:
                context_param = name
                continue
            if param.kind is param.VAR_KEYWORD and raw_schema:
                accepts_any_keyword = True  # a hand-written schema describes what **kwargs receives
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"{fn.__name__}: *args and **kwargs cannot be described as an input schema")
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[name] = (annotation, default)
        model = create_model(f"{fn.__name__}_arguments", __base__=_Arguments, **fields)
        return cls(context_param=context_param, model=model, accepts_any_keyword=accepts_any_keyword)

    def json_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = _strip_titles(self.model.model_json_schema())
        schema.setdefault("properties", {})
        return schema

    def validate(self, arguments: Mapping[str, Any]) -> BaseModel:
        try:
            # (model_validate's own validator, without its argument handling: this runs every call)
            validated: BaseModel = self.model.__pydantic_validator__.validate_python(arguments)
            return validated
        except ValidationError as exc:
            raise InvalidParams(f"Invalid arguments: {describe_validation_error(exc)}") from None

    def bind(self, arguments: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
        validated = self.validate(arguments)
        kwargs = {name: getattr(validated, name) for name in self.field_names}
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        return kwargs


def _strip_titles(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _strip_titles(value) for key, value in node.items() if key != "title"}
    if isinstance(node, list):
        return [_strip_titles(item) for item in node]
    return node
