"""The client's models agree with the API's OpenAPI document: the same fields, the same
required ones, the same JSON types (an enum's values included). A field added to, removed
from or retyped in a response body fails here until app/client/models.py follows."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from app.api import create_app
from app.client import models
from app.settings import config

pytestmark = pytest.mark.unit

# Each client model and the component schema it mirrors.
PAIRS: list[tuple[type[BaseModel], str]] = [
    (models.Job, "JobPublic"),
    (models.JobDetail, "JobDetail"),
    (models.KeyStatus, "KeyStatus"),
    (models.Child, "ChildPublic"),
    (models.Rerun, "RerunPublic"),
    (models.Fork, "ForkPublic"),
    (models.JobUsage, "JobUsage"),
    (models.ModelUsage, "ModelUsage"),
    (models.WaitingFor, "WaitingFor"),
    (models.WaitRule, "WaitRule"),
    (models.JobBatch, "JobBatchPublic"),
    (models.JobRequest, "JobBatchItem"),
    (models.StreamEvent, "StreamEventPublic"),
    (models.StreamPage, "StreamPage"),
    (models.StateValue, "StatePublic"),
    (models.StatePage, "StatePage"),
    (models.CallbackAnswered, "CallbackAnswered"),
    (models.CallbackHeartbeat, "CallbackHeartbeat"),
    (models.Message, "MessagePublic"),
    (models.MessageSent, "MessageSent"),
    (models.WorkerInfo, "WorkerPublic"),
    (models.KindFlow, "FlowPublic"),
    (models.KindRate, "RatePublic"),
]


@pytest.fixture(scope="module")
def components() -> dict[str, Any]:
    settings = config.load(
        database_url="postgresql://u@127.0.0.1:9/d",
        queue_url="http://127.0.0.1:9/q",
        dlq_url="http://127.0.0.1:9/d",
    )
    schemas: dict[str, Any] = create_app(settings).openapi()["components"]["schemas"]
    return schemas


def coarse(schema: dict[str, Any], defs: dict[str, Any]) -> frozenset[str]:
    """A property's JSON types: "string:uuid", "integer", "enum:a,b", "object", "any"..."""
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        if "enum" in target:
            return frozenset({"enum:" + ",".join(sorted(map(str, target["enum"])))})
        return frozenset({"object"})
    if "anyOf" in schema:
        return frozenset().union(*(coarse(s, defs) for s in schema["anyOf"]))
    if "enum" in schema:
        return frozenset({"enum:" + ",".join(sorted(map(str, schema["enum"])))})
    if "const" in schema:
        return frozenset({f"enum:{schema['const']}"})
    if "type" not in schema:
        return frozenset({"any"})
    kind = schema["type"]
    if kind == "array":
        return frozenset({f"array[{','.join(sorted(coarse(schema['items'], defs)))}]"})
    return frozenset({f"{kind}:{schema['format']}" if "format" in schema else kind})


def shape(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    props = schema.get("properties", {})
    return {
        "fields": {name: sorted(coarse(p, defs)) for name, p in props.items()},
        "required": sorted(schema.get("required", [])),
    }


@pytest.mark.parametrize(("model", "component"), PAIRS, ids=[c for _, c in PAIRS])
def test_a_client_model_matches_its_openapi_schema(
    model: type[BaseModel], component: str, components: dict[str, Any]
) -> None:
    assert component in components, f"the API has no {component} schema any more"
    mine = model.model_json_schema(ref_template="#/$defs/{model}")
    my_defs = {**mine.get("$defs", {}), model.__name__: mine}
    assert shape(mine, my_defs) == shape(components[component], components)


def test_the_client_knows_every_job_state(components: dict[str, Any]) -> None:
    assert sorted(s.value for s in models.JobState) == sorted(components["JobState"]["enum"])


def test_a_drift_is_caught(components: dict[str, Any]) -> None:
    """The check itself: a field the API does not have, or a wrong type, differs."""

    class Drifted(models.Child):
        extra_field: int

    class Retyped(BaseModel):
        id: int
        kind: str
        state: models.JobState
        created_at: str
        finished_at: str | None

    for model in (Drifted, Retyped):
        mine = model.model_json_schema(ref_template="#/$defs/{model}")
        defs = {**mine.get("$defs", {})}
        assert shape(mine, defs) != shape(components["ChildPublic"], components)
