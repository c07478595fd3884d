"""CRD validation rules (`x-kubernetes-validations`, CEL): the local API server's evaluation, the
project CRD's spec change policy, and both through the server with the official client."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import cel
import pytest
import yaml
from kubernetes import client

from pets_localkube import celrules
from pets_localkube.schema import CustomResourceSchema

from .helpers import GROUP, PLURAL, VERSION, api_client, job

CRD = Path(__file__).resolve().parents[2] / "manifests" / "crd.yaml"
# The spec fields a created job may change; every other one is immutable (README "Changing a job").
MUTABLE_SPEC_FIELDS = {"activeDeadlineSeconds", "ttlSecondsAfterFinished", "suspend"}


def json_type_name(value) -> str:
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array")):
        if isinstance(value, kind):
            return name
    return "object"


def rules_schema(spec_properties: dict, spec_rules: list | None = None, **spec_extra) -> dict:
    spec = {"type": "object", "properties": spec_properties, **spec_extra}
    if spec_rules is not None:
        spec["x-kubernetes-validations"] = spec_rules
    return {"type": "object", "properties": {"metadata": {"type": "object"}, "spec": spec,
                                             "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}


def obj(spec: dict, name: str = "w") -> dict:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name, "uid": "u"}, "spec": spec}


def check(schema: dict, new_spec: dict, old_spec: dict | None = None, warnings: list | None = None) -> list[dict]:
    compiled = CustomResourceSchema(schema)
    return compiled.validate(obj(new_spec), obj(old_spec) if old_spec is not None else None, warnings)


def refused(schema: dict) -> str:
    with pytest.raises(celrules.InvalidRules) as raised:
        CustomResourceSchema(schema)
    return str(raised.value)


# --- how rules run -----------------------------------------------------------------------------

def test_a_rule_runs_at_its_node_and_a_failure_names_the_field_its_type_and_message():
    schema = rules_schema({"replicas": {"type": "integer", "x-kubernetes-validations": [
        {"rule": "self >= 2", "message": "at least two replicas"}]}})
    assert check(schema, {"replicas": 3}) == []
    assert check(schema, {"replicas": 1}) == [{"reason": "FieldValueInvalid", "field": "spec.replicas",
                                               "message": 'Invalid value: "integer": at least two replicas'}]
    assert check(schema, {}) == []  # never on an absent value


def test_without_a_message_the_detail_is_the_failed_rule():
    schema = rules_schema({"x": {"type": "string"}}, [{"rule": "self.x != 'a'"}])
    assert check(schema, {"x": "a"})[0]["message"] == "Invalid value: \"object\": failed rule: self.x != 'a'"


def test_rules_run_for_every_list_item_and_map_value_with_their_paths():
    schema = rules_schema({
        "ports": {"type": "array", "items": {"type": "integer", "x-kubernetes-validations": [{"rule": "self > 1024", "message": "high ports only"}]}},
        "labels": {"type": "object", "additionalProperties": {
            "type": "string", "x-kubernetes-validations": [{"rule": "size(self) <= 3", "message": "short"}]}},
    })
    causes = check(schema, {"ports": [2000, 80, 22], "labels": {"a": "ok", "b": "toolong"}})
    assert [c["field"] for c in causes] == ["spec.labels[b]", "spec.ports[1]", "spec.ports[2]"]


def test_root_rules_see_apiversion_kind_and_metadata_name_only():
    schema = rules_schema({"prefix": {"type": "string"}})
    schema["x-kubernetes-validations"] = [
        {"rule": "self.metadata.name.startsWith(self.spec.prefix) && self.kind == 'Widget'", "message": "name must start with the prefix"},
        {"rule": "!has(self.metadata.uid)", "message": "uid is not visible"}]
    assert check(schema, {"prefix": "w"}) == []
    assert check(schema, {"prefix": "z"}) == [{"reason": "FieldValueInvalid", "field": "<nil>",
                                               "message": 'Invalid value: "object": name must start with the prefix'}]


def test_numbers_are_doubles_integers_ints_and_nulls_absent():
    schema = rules_schema({"rate": {"type": "number"}, "count": {"type": "integer"}, "note": {"type": "string", "nullable": True}},
                          [{"rule": "type(self.rate) == double && self.rate == 1 && type(self.count) == int", "message": "types"},
                           {"rule": "!has(self.note)", "message": "null is absent"}])
    assert check(schema, {"rate": 1, "count": 2, "note": None}) == []


def test_property_names_are_escaped_and_undeclared_fields_hidden():
    schema = rules_schema({"x-prop": {"type": "integer"}, "namespace": {"type": "string"}, "free": {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"known": {"type": "integer"}}}},
        [{"rule": "self.x__dash__prop == 1 && self.__namespace__ == 'n' && !has(self.free.unknown)", "message": "escaped"}])
    assert check(schema, {"x-prop": 1, "namespace": "n", "free": {"known": 1, "unknown": 2}}) == []


def test_a_rule_that_fails_to_evaluate_is_an_error_never_skipped():
    schema = rules_schema({"a": {"type": "integer"}}, [{"rule": "self.a > 0", "message": "a must be positive"}])
    assert check(schema, {}) == [{"reason": "FieldValueInvalid", "field": "spec",
                                  "message": 'Invalid value: "object": no such key: a evaluating rule: a must be positive'}]


def test_reason_field_path_and_message_expression():
    schema = rules_schema({"min": {"type": "integer"}, "max": {"type": "integer"}}, [
        {"rule": "self.min <= self.max", "messageExpression": "'min ' + string(self.min) + ' is above max ' + string(self.max)",
         "fieldPath": ".max", "reason": "FieldValueForbidden"},
        {"rule": "self.max < 100", "messageExpression": "''", "message": "max below 100"}])
    assert check(schema, {"min": 5, "max": 200}) == [
        {"reason": "FieldValueInvalid", "field": "spec", "message": 'Invalid value: "object": max below 100'}]
    assert check(schema, {"min": 5, "max": 3}) == [
        {"reason": "FieldValueForbidden", "field": "spec.max", "message": "Forbidden: min 5 is above max 3"}]


def test_a_transition_rule_runs_only_on_update_where_the_old_value_exists():
    schema = rules_schema({"size": {"type": "integer", "x-kubernetes-validations": [
        {"rule": "self >= oldSelf", "message": "size may only grow"}]}})
    assert check(schema, {"size": 1}) == []  # create
    assert check(schema, {"size": 1}, {}) == []  # no old value
    assert check(schema, {"size": 3}, {"size": 2}) == []
    assert check(schema, {"size": 1}, {"size": 2}) == [{"reason": "FieldValueInvalid", "field": "spec.size",
                                                        "message": 'Invalid value: "integer": size may only grow'}]


def test_optional_old_self_runs_on_create_too():
    schema = rules_schema({"name": {"type": "string", "x-kubernetes-validations": [
        {"rule": "oldSelf.hasValue() ? self == oldSelf.value() : self.startsWith('x')", "optionalOldSelf": True,
         "message": "starts with x, then immutable"}]}})
    assert check(schema, {"name": "xa"}) == []
    assert len(check(schema, {"name": "a"})) == 1
    assert check(schema, {"name": "a"}, {"name": "a"}) == []
    assert len(check(schema, {"name": "xb"}, {"name": "xa"})) == 1


def test_items_of_a_map_list_are_correlated_by_their_keys():
    item = {"type": "object", "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
            "x-kubernetes-validations": [{"rule": "self.value == oldSelf.value", "message": "value is immutable"}]}
    schema = rules_schema({"env": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                                   "items": item}})
    old = {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    assert check(schema, {"env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}, {"name": "C", "value": "3"}]}, old) == []
    assert [c["field"] for c in check(schema, {"env": [{"name": "B", "value": "9"}]}, old)] == ["spec.env[0]"]


def test_a_failing_rule_on_an_unchanged_value_is_ratcheted_to_a_warning():
    schema = rules_schema({"a": {"type": "integer", "x-kubernetes-validations": [{"rule": "self < 10", "message": "below 10"}]},
                           "b": {"type": "integer"}})
    warnings: list[str] = []
    assert check(schema, {"a": 20, "b": 2}, {"a": 20, "b": 1}, warnings) == []
    assert warnings == ['spec.a: Invalid value: "integer": below 10']
    assert len(check(schema, {"a": 21}, {"a": 20})) == 1


def test_schema_errors_that_block_the_rules_say_so():
    schema = rules_schema({"a": {"type": "integer"}}, [{"rule": "self.a > 0"}])
    causes = check(schema, {"a": "text"})
    assert causes[0]["reason"] == "FieldValueTypeInvalid"
    assert causes[1] == celrules.BLOCKED_CAUSE


# --- what a CRD may carry: refused at apply time, as the API server refuses it, or because this one
#     cannot evaluate it -------------------------------------------------------------------------

@pytest.mark.parametrize("rule, expected", [
    ({"rule": "self.a =="}, 'x-kubernetes-validations[0].rule: Invalid value: "self.a ==": compilation failed: '),
    ({"rule": ""}, "x-kubernetes-validations[0].rule: Required value: rule is not specified"),
    ({"rule": "self.a > 0", "message": "two\nlines"}, "message: Invalid value: \"two\\nlines\": must not contain line breaks"),
    ({"rule": "self.a > 0 &&\n self.a < 9"}, "message: Required value: message must be specified if rule contains line breaks"),
    ({"rule": "self.a > 0", "reason": "Nope"}, 'reason: Unsupported value: "Nope": supported values: '),
    ({"rule": "self.a > 0", "fieldPath": ".b"}, 'fieldPath: Invalid value: ".b": must be a valid path'),
    ({"rule": "self.a > 0", "optionalOldSelf": True}, "optionalOldSelf: Invalid value: true: may not be set if oldSelf is not used in rule"),
    ({"rule": "slef.a > 0"}, "compilation failed: undeclared reference to 'slef'"),
    ({"rule": "quantity(self.q).isLessThan(quantity('1Gi'))"},
     "the local API server (pets_localkube) cannot evaluate 'isLessThan', 'quantity'"),
    ({"rule": "math.greatest(self.a, 1) == 1"}, "cannot evaluate 'math.greatest'"),
    ({"rule": "self.a > 0", "messageExpression": "self.a +"}, "messageExpression: Invalid value: \"self.a +\": messageExpression compilation failed"),
])
def test_rules_a_crd_may_not_carry_are_refused_when_it_is_applied(rule, expected):
    message = refused(rules_schema({"a": {"type": "integer"}, "q": {"type": "string"}}, [rule]))
    assert message.startswith("openAPIV3Schema.properties[spec].x-kubernetes-validations[0]")
    assert expected in message


def test_old_self_is_refused_where_old_values_cannot_be_correlated():
    schema = rules_schema({"ports": {"type": "array", "items": {"type": "integer", "x-kubernetes-validations": [
        {"rule": "self == oldSelf"}]}}})
    assert refused(schema) == ('openAPIV3Schema.properties[spec].properties[ports].items.x-kubernetes-validations[0].rule: '
                               'Invalid value: "self == oldSelf": oldSelf cannot be used on the uncorrelatable portion of the '
                               'schema within openAPIV3Schema.properties[spec].properties[ports]')


def test_rules_inside_logical_junctors_are_refused():
    schema = rules_schema({"a": {"type": "integer"}}, allOf=[{"x-kubernetes-validations": [{"rule": "self.a > 0"}]}])
    assert "rules inside allOf are not supported by the local API server" in refused(schema)


SUPPORTED_SAMPLES = [
    "size('ab') == 2 && 'ab'.size() == 2 && size([1]) == 1 && size({'a': 1}) == 1",
    "'abc'.contains('b') && 'abc'.startsWith('a') && 'abc'.endsWith('c') && 'abc'.matches('^a.c$')",
    "int('3') == 3 && uint(3) == 3u && double(3) == 3.0 && string(3) == '3' && bytes('a') == b'a' && type(1) == int && dyn(1) == 1",
    "duration('1s') == duration('1000ms') && timestamp('2020-01-01T00:00:00Z') < timestamp('2021-01-01T00:00:00Z')",
    "timestamp('2020-02-03T04:05:06Z').getFullYear() == 2020 && timestamp('2020-02-03T04:05:06Z').getMonth() == 1",
    "timestamp('2020-02-03T04:05:06Z').getDate() == 3 && timestamp('2020-02-03T04:05:06Z').getDayOfMonth() == 2",
    "timestamp('2020-02-03T04:05:06Z').getDayOfWeek() == 1 && timestamp('2020-02-03T04:05:06Z').getDayOfYear() == 33",
    "timestamp('2020-02-03T04:05:06Z').getHours() == 4 && timestamp('2020-02-03T04:05:06Z').getMinutes() == 5",
    "duration('5s').getSeconds() == 5 && duration('5s').getMilliseconds() == 5000",
    "[1, 2].all(x, x > 0) && [1].exists(x, x == 1) && [1].exists_one(x, x == 1) && [1].map(x, x + 1) == [2]",
    "[1, 2].filter(x, x > 1) == [2] && 1 in [1] && [1][0] == 1 && {'a': 1}['a'] == 1 && (true ? true : false)",
    "-size([1]) < 0 && !false && 5 % 2 == 1 && 2 * 3 == 6 && 6 / 2 == 3 && 3 - 1 == 2 && 1 != 2 && 1 <= 1 && 2 >= 1 && 2 > 1 || false",
    "optional.of(1).hasValue() && optional.of(1).value() == 1 && optional.none().orValue(2) == 2",
    "'AbC'.lowerAscii() == 'abc' && 'abc'.upperAscii() == 'ABC' && ' a '.trim() == 'a' && 'aa'.replace('a', 'b') == 'bb'",
    "'a,b'.split(',') == ['a', 'b'] && ['a', 'b'].join(',') == 'a,b' && 'abc'.substring(1) == 'bc' && 'abc'.charAt(1) == 'b'",
    "'abcb'.indexOf('b') == 1 && 'abcb'.lastIndexOf('b') == 3",
]


def test_every_function_the_server_accepts_evaluates():
    schema = rules_schema({}, [{"rule": sample, "message": f"sample {index}"} for index, sample in enumerate(SUPPORTED_SAMPLES)])
    assert check(schema, {}) == []
    used = set().union(*(cel.compile(sample).functions() for sample in SUPPORTED_SAMPLES))
    assert celrules.SUPPORTED_FUNCTIONS - used == set()


# --- the project's CRD: what may change on a job once created ----------------------------------

def project_schema() -> dict:
    return yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.fixture(scope="module")
def project() -> CustomResourceSchema:
    return CustomResourceSchema(project_schema())


def stored_job(project: CustomResourceSchema, **spec) -> dict:
    created = job("j", **spec)
    created["metadata"].update(namespace="default", uid="u", generation=1)
    project.default(created)
    assert project.validate(created) == []
    return created


def changed(project: CustomResourceSchema, current: dict, **spec) -> list[dict]:
    new = copy.deepcopy(current)
    for key, value in spec.items():
        if value is None:
            new["spec"].pop(key, None)
        else:
            new["spec"][key] = value
    project.prune(new)
    project.default(new)
    return project.validate(new, current)


def test_every_spec_field_but_the_mutable_ones_is_immutable_in_the_crd():
    spec = project_schema()["properties"]["spec"]
    with_rule = {name for name, field in spec["properties"].items()
                 if {"rule": "self == oldSelf"}.items() <= (field.get("x-kubernetes-validations") or [{}])[0].items()}
    assert with_rule == set(spec["properties"]) - MUTABLE_SPEC_FIELDS
    # An optional field without a default may be absent from the old or the new spec, where its own
    # rule does not run: a rule on the spec refuses adding or removing it.
    optional = {name for name in with_rule if name not in spec.get("required", []) and "default" not in spec["properties"][name]}
    presence = {rule["rule"]: rule for rule in spec["x-kubernetes-validations"] if "oldSelf" in rule["rule"]}
    escaped = {name: celrules.escape(name) for name in optional}  # a CEL reserved word is `__word__` in rules
    assert set(presence) == {f"has(self.{e}) == has(oldSelf.{e})" for e in escaped.values()}
    for rule in list(presence.values()) + [spec["properties"][n]["x-kubernetes-validations"][0] for n in with_rule]:
        assert "immutable" in rule["message"] and "delete and recreate the job" in rule["message"]


@pytest.mark.parametrize("field, value", [
    ("numNodes", 3), ("epochs", 9), ("model", "resnet18"), ("data", {"hostPath": "/images"}),
    ("data", {"synthetic": {"classes": 3, "imagesPerClass": 4}}), ("processesPerNode", 2), ("maxLearningRate", 0.1),
    ("seed", 7), ("batchSize", 8), ("imageSize", 64), ("masterPort", 29501), ("mixedPrecision", "bf16"),
    ("backoffLimit", 2), ("image", "other:1"), ("env", [{"name": "A", "value": "2"}]),
    ("nodeSelector", {"pool": "b"}), ("resources", {"limits": {"cpu": "2"}}), ("checkpoint", {"hostPath": "/b"}),
])
def test_changing_an_immutable_field_is_refused_with_its_path_and_message(project, field, value):
    current = stored_job(project, numNodes=2, image="pets-trainer:1", env=[{"name": "A", "value": "1"}],
                         nodeSelector={"pool": "a"}, resources={"limits": {"cpu": "1"}}, checkpoint={"hostPath": "/a"})
    causes = changed(project, current, **{field: value})
    assert causes == [{"reason": "FieldValueInvalid", "field": f"spec.{field}",
                       "message": f'Invalid value: "{json_type_name(value)}": '
                                  f"{field} is immutable: delete and recreate the job to change it"}]


@pytest.mark.parametrize("field, value", [("checkpoint", {"hostPath": "/c"}), ("image", "x:1"), ("env", []),
                                          ("tolerations", [{"key": "gpu", "operator": "Exists"}]), ("serviceAccountName", "sa"),
                                          ("pretrainedWeights", "/w.pt"), ("imagePullPolicy", "Never"), ("nodeSelector", {}),
                                          ("resources", {})])
def test_adding_or_removing_an_optional_immutable_field_is_refused(project, field, value):
    without = stored_job(project)
    message = f'Invalid value: "object": {field} is immutable: it cannot be added or removed; delete and recreate the job to change it'
    assert changed(project, without, **{field: value}) == [{"reason": "FieldValueInvalid", "field": "spec", "message": message}]
    with_it = stored_job(project, **{field: value})
    assert changed(project, with_it, **{field: None}) == [{"reason": "FieldValueInvalid", "field": "spec", "message": message}]


def test_the_mutable_fields_change_freely_and_an_unchanged_spec_passes(project):
    current = stored_job(project, numNodes=2)
    assert changed(project, current) == []
    assert changed(project, current, numNodes=2, epochs=5) == []  # the same values, defaults spelled out
    assert changed(project, current, ttlSecondsAfterFinished=60, activeDeadlineSeconds=600) == []
    with_ttl = stored_job(project, ttlSecondsAfterFinished=60, activeDeadlineSeconds=600)
    assert changed(project, with_ttl, ttlSecondsAfterFinished=None, activeDeadlineSeconds=30) == []


def test_on_create_no_transition_rule_runs(project):
    stored_job(project, numNodes=4, checkpoint={"hostPath": "/c"})


# --- through the local API server ----------------------------------------------------------------

@pytest.fixture
def custom(local_cluster):
    with api_client(local_cluster) as api:
        yield client.CustomObjectsApi(api)


def refusal(call) -> dict:
    with pytest.raises(client.ApiException) as raised:
        call()
    assert raised.value.status == 422
    return json.loads(raised.value.body)


def test_the_server_refuses_a_spec_change_and_keeps_the_stored_job(custom):
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("j", numNodes=2))
    body = refusal(lambda: custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "j", {"spec": {"numNodes": 3}}))
    assert body["reason"] == "Invalid"
    assert body["message"] == ('PetsTrainingJob.training.pets.dev "j" is invalid: spec.numNodes: Invalid value: "integer": '
                               "numNodes is immutable: delete and recreate the job to change it")
    assert body["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "spec.numNodes",
                                          "message": 'Invalid value: "integer": numNodes is immutable: delete and recreate the job to change it'}]
    replaced = copy.deepcopy(created)
    replaced["spec"]["epochs"] = 9
    refusal(lambda: custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "j", replaced))
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "j")
    assert stored["spec"] == created["spec"] and stored["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_status_metadata_and_mutable_fields_still_change(custom):
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, job("j", numNodes=2))
    status = custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "j", {"status": {"phase": "Running"}})
    assert status["status"]["phase"] == "Running" and status["metadata"]["generation"] == 1
    labelled = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "j", {"metadata": {
        "labels": {"team": "a"}, "annotations": {"note": "x"}, "finalizers": ["example.com/hold"]}})
    assert labelled["metadata"]["labels"] == {"team": "a"} and labelled["metadata"]["generation"] == 1
    ttl = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "j", {"spec": {"ttlSecondsAfterFinished": 30}})
    assert ttl["spec"]["ttlSecondsAfterFinished"] == 30 and ttl["metadata"]["generation"] == 2
    custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "j", {"metadata": {"finalizers": None}})


def test_a_crd_whose_rule_the_server_cannot_evaluate_is_refused_when_applied(local_cluster):
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"},
           "spec": {"group": "example.com", "scope": "Cluster", "names": {"plural": "widgets", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": rules_schema(
                        {"memory": {"type": "string"}}, [{"rule": "quantity(self.memory).isLessThan(quantity('1Gi'))"}])}}]}}
    with api_client(local_cluster) as api:
        body = refusal(lambda: client.ApiextensionsV1Api(api).create_custom_resource_definition(crd))
    assert body["details"]["causes"][0]["field"] == "spec.versions"
    assert "cannot evaluate 'isLessThan', 'quantity'" in body["message"]


# --- the project's CRD: spec.tracking ----------------------------------------------------------------

@pytest.mark.parametrize("tracking, field, message", [
    ({"mlflow": {"trackingUri": "mlflow:5000"}}, "spec.tracking.mlflow.trackingUri",
     "trackingUri must be an http://, https:// or file:// URI"),
    ({"mlflow": {"trackingUri": "s3://bucket/mlruns"}}, "spec.tracking.mlflow.trackingUri",
     "trackingUri must be an http://, https:// or file:// URI"),
    ({"mlflow": {"trackingUri": "https://me:secret@mlflow.example"}}, "spec.tracking.mlflow.trackingUri",
     "trackingUri must not carry credentials: put them in a Secret and name it in usernameSecret/passwordSecret or tokenSecret"),
    ({"mlflow": {"trackingUri": "http://m", "usernameSecret": {"name": "s", "key": "u"}}}, "spec.tracking.mlflow",
     "usernameSecret and passwordSecret go together"),
    ({"mlflow": {"trackingUri": "http://m", "tokenSecret": {"name": "s", "key": "t"},
                 "usernameSecret": {"name": "s", "key": "u"}, "passwordSecret": {"name": "s", "key": "p"}}},
     "spec.tracking.mlflow", "give tokenSecret or usernameSecret/passwordSecret, not both"),
    ({"tensorboard": {"hostPath": "/srv/tb"}}, "spec.tracking.tensorboard",
     "tensorboard with a volume of its own needs logDir: where the volume is mounted in pod 0"),
    ({"logEverySteps": 5}, "spec.tracking", "tracking needs tensorboard, mlflow or both"),
])
def test_the_crd_refuses_tracking_that_cannot_work(project, tracking, field, message):
    created = job("j", tracking=tracking)
    created["metadata"].update(namespace="default", uid="u")
    project.default(created)
    causes = project.validate(created)
    assert {"reason": "FieldValueInvalid", "field": field,
            "message": f'Invalid value: "{"string" if field.endswith("Uri") else "object"}": {message}'} in causes, causes


def test_the_crd_takes_tracking_and_fills_in_its_defaults(project):
    created = stored_job(project, output={}, tracking={"tensorboard": {}, "mlflow": {
        "trackingUri": "https://mlflow.example", "tokenSecret": {"name": "s", "key": "t"}}})
    assert created["spec"]["tracking"] == {
        "logEverySteps": 10, "tensorboard": {"enabled": True},
        "mlflow": {"trackingUri": "https://mlflow.example", "experimentName": "pets", "tokenSecret": {"name": "s", "key": "t"}}}
    assert changed(project, created, tracking=None)[0]["message"].endswith(
        "tracking is immutable: it cannot be added or removed; delete and recreate the job to change it")
