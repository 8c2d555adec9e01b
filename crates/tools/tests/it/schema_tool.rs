//! Tools defined at run time from a JSON Schema and a closure: validation on
//! the host (`bad_args` naming the JSON pointer, the handler not called, no
//! budget spent, against a real rpc server and the generated stub), schema
//! and name errors at registration, and the stub functions generated from
//! hard schemas (golden file, `py_compile`, `inspect.signature`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::golden;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use golden::check_golden;
use serde_json::{Value, json};
use toolcell_rpc::{CellSpec, Server, ServerConfig};
use toolcell_tools::{
    DynTool, RegistryError, SchemaTool, ToolContext, ToolError, ToolRegistry, ToolSettings, schema,
};

fn echo(name: &str, description: &str, input: Value) -> SchemaTool {
    SchemaTool::new(
        name,
        description,
        input,
        |args: Value, _cx: ToolContext| async move { Ok(json!({ "args": args })) },
    )
    .unwrap()
}

/// Tools with schemas that are hard to render: nested objects, `$ref`
/// chains, `anyOf` with null, enums, arrays of objects, no properties,
/// required after optional properties, keyword property names, a tool name
/// that is not an identifier, and a draft-07 schema with `definitions`.
fn hard_tools() -> Vec<Arc<dyn DynTool>> {
    let tools = vec![
        echo(
            "get-user",
            "Look a user up.\nReturns the user's record.",
            json!({
                "type": "object",
                "properties": {
                    "id": {"type": "integer", "description": "The user's id."},
                    "from": {"type": "string", "description": "Directory to search."},
                    "class": {"enum": ["staff", "guest"], "default": "guest", "description": "Kind of user."}
                },
                "required": ["id"]
            }),
        )
        .with_output_schema(json!({
            "type": "object",
            "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}
        }))
        .unwrap(),
        echo(
            "nested",
            "Nested objects and a $ref chain.",
            json!({
                "type": "object",
                "properties": {
                    "filter": {
                        "type": "object",
                        "description": "What to match.",
                        "properties": {
                            "name": {"type": "string"},
                            "tags": {"type": "object", "properties": {"any": {"type": "array", "items": {"type": "string"}}}}
                        }
                    },
                    "address": {"$ref": "#/$defs/Home"}
                },
                "required": ["filter", "address"],
                "$defs": {
                    "Home": {"$ref": "#/$defs/Address"},
                    "Address": {
                        "type": "object",
                        "description": "A postal address.",
                        "properties": {"street": {"type": "string"}, "zip": {"$ref": "#/$defs/Zip"}},
                        "required": ["street"]
                    },
                    "Zip": {"type": "string", "pattern": "^[0-9]{5}$"}
                }
            }),
        )
        .with_output_schema(json!({
            "type": "object",
            "properties": {"match": {"$ref": "#/$defs/M"}},
            "$defs": {"M": {"type": "object", "properties": {"score": {"type": "number"}}}}
        }))
        .unwrap(),
        echo(
            "maybe",
            "Unions with null.",
            json!({
                "type": "object",
                "properties": {
                    "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "A note, or null."},
                    "count": {"type": ["integer", "null"], "default": null},
                    "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]}
                }
            }),
        ),
        echo(
            "enums",
            "Enumerations.",
            json!({
                "type": "object",
                "properties": {
                    "mode": {"type": "string", "enum": ["fast", "slow"]},
                    "level": {"type": "integer", "enum": [1, 2, 3], "default": 2},
                    "shape": {"enum": [{"x": 1}, "flat"]}
                },
                "required": ["mode"]
            }),
        ),
        echo(
            "batch",
            "Arrays of objects.",
            json!({
                "type": "object",
                "properties": {
                    "items": {
                        "type": "array",
                        "description": "The records.",
                        "items": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
                    },
                    "ratio": {"type": "number", "default": 0.5},
                    "dry": {"type": "boolean", "default": false}
                },
                "required": ["items"]
            }),
        )
        .with_output_schema(json!({
            "type": "array",
            "items": {"type": "object", "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"}}}
        }))
        .unwrap(),
        echo("ping", "", json!({"type": "object"})),
        echo(
            "ordering",
            "Required properties after optional ones.",
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "string"},
                    "b": {"type": "string"},
                    "c": {"type": "integer", "default": 3},
                    "d": {"type": "array"},
                    "my-key": {"type": "string", "description": "Not an identifier."},
                    "_call": {"type": "string"}
                },
                "required": ["d", "b"]
            }),
        ),
        echo(
            "legacy",
            "A draft-07 schema with definitions.",
            json!({
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "properties": {"thing": {"$ref": "#/definitions/Thing"}},
                "required": ["thing"],
                "definitions": {"Thing": {"type": "object", "properties": {"n": {"type": "integer"}}}}
            }),
        ),
        echo("print", "Named like a builtin.", json!({"type": "object"})),
    ];
    let mut reg = ToolRegistry::empty();
    for t in tools {
        reg.add(Arc::new(t)).unwrap();
    }
    let names: Vec<&str> = reg.names().collect();
    reg.select(&names).unwrap()
}

fn python(dir: &Path, code: &str, envs: &[(&str, &str)]) -> std::process::Output {
    Command::new("python3")
        .arg("-c")
        .arg(code)
        .current_dir(dir)
        .env("PYTHONPATH", dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .envs(envs.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn stubs_for_hard_schemas_match_their_golden_file() {
    let src = toolcell_stubs::python::stub_module(&hard_tools()).unwrap();
    let functions = &src[toolcell_stubs::python::PRELUDE.len()..];
    check_golden("schema_tools.py", functions);
}

#[test]
fn the_generated_module_compiles_and_its_signatures_say_what_the_schemas_say() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("toolcell_tools.py");
    std::fs::write(
        &path,
        toolcell_stubs::python::stub_module(&hard_tools()).unwrap(),
    )
    .unwrap();
    let out = Command::new("python3")
        .args(["-m", "py_compile"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = python(
        tmp.path(),
        r#"
import inspect, json, toolcell_tools as t
sigs = {}
for name in t.__all__:
    f = getattr(t, name)
    if name in ("ToolError", "json_parse", "shell_quote", "retry"):
        continue
    sig = inspect.signature(f)
    sigs[name] = {
        "params": [
            [p.name, None if p.default is inspect.Parameter.empty else repr(p.default),
             inspect.formatannotation(p.annotation)]
            for p in sig.parameters.values()
        ],
        "returns": inspect.formatannotation(sig.return_annotation),
        "doc": f.__doc__,
    }
print(json.dumps(sigs))
"#,
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sigs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let params = |name: &str| sigs[name]["params"].clone();
    assert_eq!(
        params("get_user"),
        json!([
            ["id", null, "int"],
            ["from_", "None", "Optional[str]"],
            ["class_", "'guest'", "Literal['staff', 'guest']"]
        ])
    );
    assert_eq!(sigs["get_user"]["returns"], "Dict[str, Any]");
    let doc = sigs["get_user"]["doc"].as_str().unwrap();
    for needle in [
        "Look a user up.",
        "The host knows this tool as \"get-user\".",
        "id (int): The user's id.",
        "from_ (Optional[str]): Directory to search. (sent as \"from\")",
        "{id: int, name: str}",
    ] {
        assert!(doc.contains(needle), "{needle:?} not in {doc}");
    }
    assert_eq!(
        params("nested"),
        json!([
            ["filter", null, "Dict[str, Any]"],
            ["address", null, "Dict[str, Any]"]
        ])
    );
    let doc = sigs["nested"]["doc"].as_str().unwrap();
    assert!(
        doc.contains("address (Dict[str, Any]): A postal address."),
        "{doc}"
    );
    assert!(doc.contains("{match: {score: float}}"), "{doc}");
    assert_eq!(
        params("maybe"),
        json!([
            ["note", "None", "Optional[str]"],
            ["count", "None", "Optional[int]"],
            ["either", "None", "Union[str, int, NoneType]"]
        ])
    );
    assert_eq!(
        params("enums"),
        json!([
            ["mode", null, "Literal['fast', 'slow']"],
            ["level", "2", "Literal[1, 2, 3]"],
            ["shape", "None", "Any"]
        ])
    );
    assert_eq!(
        params("batch"),
        json!([
            ["items", null, "List[Dict[str, Any]]"],
            ["ratio", "0.5", "float"],
            ["dry", "False", "bool"]
        ])
    );
    assert_eq!(sigs["batch"]["returns"], "List[Dict[str, Any]]");
    assert_eq!(params("ping"), json!([]));
    assert_eq!(sigs["ping"]["returns"], "Any");
    assert_eq!(
        params("ordering"),
        json!([
            ["b", null, "str"],
            ["d", null, "List[Any]"],
            ["a", "None", "Optional[str]"],
            ["c", "3", "int"],
            ["my_key", "None", "Optional[str]"],
            ["_call_", "None", "Optional[str]"]
        ])
    );
    assert_eq!(params("legacy"), json!([["thing", null, "Dict[str, Any]"]]));
    // A builtin's name is never shadowed in the cell's namespace.
    assert!(
        sigs.get("print").is_none() && sigs.get("print_").is_some(),
        "{sigs}"
    );
}

/// The stub sends the original tool name and property keys, and leaves out
/// optional properties that were not given (their schemas refuse null).
#[test]
fn the_stub_sends_original_names_and_omits_unset_optionals() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut reg = ToolRegistry::empty();
    for t in hard_tools() {
        reg.add(t).unwrap();
    }
    let dispatcher = reg.dispatcher(ToolSettings::new(tmp.path()));
    let _guard = rt.enter();
    let server =
        Server::bind_unix(tmp.path().join("k"), dispatcher, ServerConfig::default()).unwrap();
    let cell = server
        .open_cell(
            CellSpec::new("c1", tokio::time::Instant::now() + Duration::from_secs(60))
                .budget(10)
                .enable(["get-user", "ordering"]),
        )
        .unwrap();
    let moddir = tmp.path().join("mod");
    std::fs::create_dir(&moddir).unwrap();
    std::fs::write(
        moddir.join("toolcell_tools.py"),
        toolcell_stubs::python::stub_module(&reg.select(&["get-user", "ordering"]).unwrap())
            .unwrap(),
    )
    .unwrap();
    let token = server.token().expose().to_string();
    let out = python(
        &moddir,
        r#"
import json
from toolcell_tools import get_user, ordering
print(json.dumps(get_user(7, from_="ldap")["args"], sort_keys=True))
print(json.dumps(get_user(8)["args"], sort_keys=True))
print(json.dumps(ordering("x", [1], my_key="k", _call_="c")["args"], sort_keys=True))
"#,
        &[
            ("TOOLCELL_RPC", server.endpoint()),
            ("TOOLCELL_RPC_TOKEN", &token),
        ],
    );
    let report = cell.settle();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(
        lines,
        [
            r#"{"class": "guest", "from": "ldap", "id": 7}"#,
            r#"{"class": "guest", "id": 8}"#,
            r#"{"_call": "c", "b": "x", "c": 3, "d": [1], "my-key": "k"}"#,
        ]
    );
    assert_eq!(report.dispatched(), 3);
}

fn counting_tool(calls: Arc<AtomicUsize>) -> SchemaTool {
    SchemaTool::new(
        "store",
        "Store records.",
        json!({
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
                "owner": {"$ref": "#/$defs/Owner"}
            },
            "required": ["items"],
            "additionalProperties": false,
            "$defs": {
                "Item": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
                "Owner": {"$ref": "#/$defs/Name"},
                "Name": {"type": "string", "minLength": 2}
            }
        }),
        move |args: Value, _cx| {
            let calls = Arc::clone(&calls);
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(json!({"stored": args["items"].as_array().map_or(0, Vec::len)}))
            }
        },
    )
    .unwrap()
}

#[test]
fn a_violation_names_the_json_pointer_of_the_offending_value() {
    let tool = counting_tool(Arc::new(AtomicUsize::new(0)));
    assert_eq!(tool.validate(&json!({"items": [{"id": 1}]})), Ok(()));
    let cases = [
        (
            json!({"items": [{"id": 1}, {"id": 2}, {"id": "x"}]}),
            r#"/items/2/id: "x" is not of type "integer""#,
        ),
        (
            json!({"items": [], "owner": "a"}),
            r#"/owner: "a" is shorter than 2 characters"#,
        ),
        (json!({}), r#""items" is a required property"#),
        (
            json!({"items": [], "extra": 1}),
            "Additional properties are not allowed ('extra' was unexpected)",
        ),
        (
            json!({"items": [{}]}),
            r#"/items/0: "id" is a required property"#,
        ),
    ];
    for (args, want) in cases {
        assert_eq!(tool.validate(&args).unwrap_err(), want, "{args}");
    }
    // A huge offending value is cut in the message.
    let big = "y".repeat(100_000);
    let err = tool.validate(&json!({"items": big})).unwrap_err();
    assert!(
        err.starts_with("/items: \"yyyy") && err.len() < 300,
        "{err}"
    );
}

#[test]
fn bad_args_reach_no_handler_and_spend_no_budget() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut reg = ToolRegistry::empty();
    reg.add(Arc::new(counting_tool(Arc::clone(&calls))))
        .unwrap();
    let dispatcher = reg.dispatcher(ToolSettings::new(tmp.path()));
    let _guard = rt.enter();
    let server =
        Server::bind_unix(tmp.path().join("k"), dispatcher, ServerConfig::default()).unwrap();
    let cell = server
        .open_cell(
            CellSpec::new("c1", tokio::time::Instant::now() + Duration::from_secs(60))
                .budget(1)
                .enable(["store"]),
        )
        .unwrap();
    std::fs::write(
        tmp.path().join("toolcell_tools.py"),
        toolcell_stubs::python::stub_module(&reg.select(&["store"]).unwrap()).unwrap(),
    )
    .unwrap();
    let token = server.token().expose().to_string();
    let out = python(
        tmp.path(),
        r#"
from toolcell_tools import store, ToolError
for bad in ([{"id": "x"}], "nope"):
    try:
        store(bad)
    except ToolError as e:
        print(e.code, "|", e)
print(store([{"id": 1}, {"id": 2}]))
"#,
        &[
            ("TOOLCELL_RPC", server.endpoint()),
            ("TOOLCELL_RPC_TOKEN", &token),
        ],
    );
    let report = cell.settle();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            r#"bad_args | store: bad arguments: /items/0/id: "x" is not of type "integer""#,
            r#"bad_args | store: bad arguments: /items: "nope" is not of type "array""#,
            "{'stored': 2}",
        ],
        "{text}"
    );
    // The budget of one call was enough: the refusals took none of it.
    assert_eq!(report.dispatched(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

fn schema_error(name: &str, input: Value) -> String {
    match SchemaTool::new(name, "", input, |_args: Value, _cx| async {
        Ok::<Value, ToolError>(Value::Null)
    }) {
        Ok(_) => panic!("{name}: accepted"),
        Err(e) => {
            assert!(matches!(e, RegistryError::BadSchema { .. }), "{e:?}");
            e.to_string()
        }
    }
}

#[test]
fn an_unusable_input_schema_is_a_registration_error_naming_the_tool_and_the_problem() {
    let cases = [
        (json!(true), "must be a JSON object schema"),
        (
            json!({"type": "array"}),
            "must be an object schema (\"type\": \"object\"), not \"array\"",
        ),
        (json!({"properties": {}}), "not a schema without a type"),
        (
            json!({"type": "object", "properties": {"a": {"type": "nope"}}}),
            "the input schema is not a valid JSON Schema",
        ),
        (
            json!({"type": "object", "minProperties": -1}),
            "not a valid JSON Schema",
        ),
        (
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}),
            "not a valid JSON Schema",
        ),
        (
            json!({"type": "object", "properties": {"a": {"$ref": "https://example.invalid/a.json"}}}),
            "not a valid JSON Schema",
        ),
        (
            json!({"type": "object", "properties": {"from": {}, "from_": {}}}),
            "properties of tool `t1` `from` and `from_` both map to the Python name `from_`",
        ),
    ];
    for (input, want) in cases {
        let err = schema_error("t1", input.clone());
        assert!(err.starts_with("tool `t1`: "), "{input}: {err}");
        assert!(err.contains(want), "{input}: {err}");
    }
    let ok = echo("t2", "", json!({"type": "object"}));
    let err = ok
        .with_output_schema(json!({"type": 5}))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tool `t2`: the output schema is not a valid JSON Schema"),
        "{err}"
    );
}

#[test]
fn names_that_map_to_one_python_name_are_errors_naming_both() {
    let mut reg = ToolRegistry::builtin().unwrap();
    reg.add(Arc::new(echo("get-user", "", json!({"type": "object"}))))
        .unwrap();
    let err = reg
        .add(Arc::new(echo("get_user", "", json!({"type": "object"}))))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`get-user`") && err.contains("`get_user`") && err.contains("Python name"),
        "{err}"
    );
    let err = reg
        .add(Arc::new(echo("read.file", "", json!({"type": "object"}))))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`read_file`") && err.contains("`read.file`"),
        "{err}"
    );
    let err = reg
        .add(Arc::new(echo("get-user", "", json!({"type": "object"}))))
        .unwrap_err()
        .to_string();
    assert!(err.contains("`get-user`"), "{err}");
    let err = reg
        .add(Arc::new(echo("a b", "", json!({"type": "object"}))))
        .unwrap_err();
    assert!(matches!(err, RegistryError::BadName(_)), "{err}");
    // The description names the tool as a cell calls it.
    let tools = reg.select(&["get-user"]).unwrap();
    let d = toolcell_stubs::execute_code_description(&tools, &Default::default());
    assert!(d.contains("- get_user() -> Any"), "{d}");
}

#[test]
fn every_name_the_prelude_defines_is_reserved() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("prelude.py"),
        toolcell_stubs::python::PRELUDE,
    )
    .unwrap();
    let out = python(
        tmp.path(),
        "import ast; t = ast.parse(open('prelude.py').read())\n\
         names = set()\n\
         for n in t.body:\n\
         \x20   if isinstance(n, (ast.FunctionDef, ast.ClassDef)): names.add(n.name)\n\
         \x20   elif isinstance(n, ast.Assign): names.update(x.id for x in n.targets if isinstance(x, ast.Name))\n\
         \x20   elif isinstance(n, (ast.Import, ast.ImportFrom)): names.update((a.asname or a.name) for a in n.names)\n\
         print('\\n'.join(sorted(names)))",
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names = String::from_utf8(out.stdout).unwrap();
    assert!(names.lines().count() > 10, "{names}");
    for name in names.lines() {
        assert_ne!(
            toolcell_tools::names::python_function_name(name),
            name,
            "{name} is not reserved"
        );
    }
}

mod arbitrary_names {
    use super::*;
    use proptest::prelude::*;

    /// Any text: quotes, backslashes, `"""`, NUL and other controls,
    /// keywords, digits first, non-ASCII.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z_]{1,6}",
            Just("from".to_string()),
            Just("class".to_string()),
            Just("_call".to_string()),
            Just("\"\"\"".to_string()),
            "\\PC{0,12}",
            any::<String>().prop_map(|s| s.chars().take(12).collect()),
        ]
    }

    fn property() -> impl Strategy<Value = (String, Value, bool)> {
        let schema = prop_oneof![
            Just(json!({"type": "string"})),
            Just(json!({"type": ["integer", "null"]})),
            text().prop_map(|d| json!({"type": "number", "description": d})),
            (text(), text()).prop_map(|(a, b)| json!({"enum": [a, b, 1, null]})),
            text().prop_map(|d| json!({"type": "string", "default": d})),
            Just(json!({"type": "array", "items": {"type": "object"}})),
        ];
        (text(), schema, any::<bool>())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Whatever the names, descriptions, enum values and defaults, a
        /// tool is either refused at registration or gets a module that
        /// compiles, with one parameter per property.
        #[test]
        fn any_schema_gives_a_module_that_compiles_or_a_registration_error(
            tools in proptest::collection::vec(
                (text(), text(), proptest::collection::vec(property(), 0..5)),
                1..5,
            )
        ) {
            let mut reg = ToolRegistry::empty();
            let mut expected = Vec::new();
            for (name, doc, props) in tools {
                let mut properties = serde_json::Map::new();
                let mut required = Vec::new();
                for (key, schema, req) in props {
                    if req {
                        required.push(Value::String(key.clone()));
                    }
                    properties.insert(key, schema);
                }
                let count = properties.len();
                let input = json!({"type": "object", "properties": properties, "required": required});
                let Ok(tool) = SchemaTool::new(name.clone(), doc, input, |_a: Value, _cx| async {
                    Ok::<Value, ToolError>(Value::Null)
                }) else {
                    continue;
                };
                if reg.add(Arc::new(tool)).is_ok() {
                    expected.push((toolcell_tools::names::python_function_name(&name), count));
                }
            }
            let names: Vec<String> = reg.names().map(str::to_string).collect();
            let module = toolcell_stubs::python::stub_module(&reg.select(&names).unwrap()).unwrap();
            let tmp = tempfile::tempdir().unwrap();
            std::fs::write(tmp.path().join("toolcell_tools.py"), &module).unwrap();
            let out = python(
                tmp.path(),
                "import inspect, json, toolcell_tools as t\n\
                 print(json.dumps({n: len(inspect.signature(getattr(t, n)).parameters) \
                 for n in t.__all__[4:]}))",
                &[],
            );
            prop_assert!(
                out.status.success(),
                "{}\n{module}",
                String::from_utf8_lossy(&out.stderr)
            );
            let got: Value = serde_json::from_slice(&out.stdout).unwrap();
            for (ident, count) in expected {
                prop_assert_eq!(&got[&ident], &json!(count), "{}", ident);
            }
        }
    }
}

/// Tools of two outside sources (as MCP servers' are) with the same local
/// name, a source that is down, and a top-level tool.
fn sourced_tools() -> (
    Vec<Arc<dyn toolcell_tools::DynTool>>,
    Vec<toolcell_tools::names::Unavailable>,
) {
    let search = |ns: &str| -> Arc<dyn toolcell_tools::DynTool> {
        Arc::new(
            echo(
                &format!("{ns}.search"),
                &format!("Search {ns}."),
                json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "default": 5}}, "required": ["query"]}),
            )
            .in_namespace(ns)
            .unwrap(),
        )
    };
    let odd: Arc<dyn toolcell_tools::DynTool> = Arc::new(
        echo(
            "docs.get-page",
            "Named with a dash.",
            json!({"type": "object"}),
        )
        .in_namespace("docs")
        .unwrap(),
    );
    let top: Arc<dyn toolcell_tools::DynTool> = Arc::new(echo(
        "create_ticket",
        "Top level.",
        json!({"type": "object"}),
    ));
    (
        vec![search("docs"), search("web-archive"), odd, top],
        vec![toolcell_tools::names::Unavailable {
            namespace: "billing".into(),
            message: "MCP server \"billing\" failed to start: exit status 1".into(),
        }],
    )
}

#[test]
fn outside_sources_are_submodules_with_the_same_local_names() {
    let (tools, down) = sourced_tools();
    let src = toolcell_stubs::python::stub_module_with(&tools, &down).unwrap();
    check_golden("sources.py", &src[toolcell_stubs::python::PRELUDE.len()..]);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("toolcell_tools.py"), &src).unwrap();
    let out = python(
        tmp.path(),
        r#"
import inspect, toolcell_tools as t
import toolcell_tools.docs
from toolcell_tools.web_archive import search as s2
from toolcell_tools import docs, billing
print(sorted(n for n in t.__all__ if n not in ("ToolError", "json_parse", "shell_quote", "retry")))
print(inspect.signature(docs.search), s2.__module__, s2.__qualname__, docs.__all__)
print("The host knows this tool as \"docs.get-page\"." in docs.get_page.__doc__)
try:
    billing.anything
except t.ToolError as e:
    print(e.code, e.tool, e)
"#,
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "['billing', 'create_ticket', 'docs', 'web_archive']"
    );
    assert_eq!(
        lines[1],
        "(query: str, limit: int = 5) -> Any toolcell_tools.web_archive search ['get_page', 'search']"
    );
    assert_eq!(lines[2], "True");
    assert_eq!(
        lines[3],
        "tool_failed billing.anything MCP server \"billing\" failed to start: exit status 1"
    );

    // A source named like a top-level tool is an error naming both.
    let clash: Arc<dyn toolcell_tools::DynTool> = Arc::new(
        echo("create_ticket.x", "Clash.", json!({"type": "object"}))
            .in_namespace("create_ticket")
            .unwrap(),
    );
    let mut with_clash = tools.clone();
    with_clash.push(clash);
    let err = toolcell_stubs::python::stub_module_with(&with_clash, &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("create_ticket"), "{err}");
}

/// Every Python from 3.8 to 3.13 on PATH compiles and imports the module
/// with sources (this machine has them all through pyenv; `python3` at
/// least must be there).
#[test]
fn the_module_with_sources_works_on_every_python_from_3_8() {
    let (mut tools, down) = sourced_tools();
    tools.extend(hard_tools());
    let src = toolcell_stubs::python::stub_module_with(&tools, &down).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("toolcell_tools.py"), &src).unwrap();
    // pyenv's installs (the shims only run the selected version), the
    // system's, and whatever `python3` is.
    let mut candidates: Vec<String> = Vec::new();
    let pyenv = std::env::var("PYENV_ROOT")
        .unwrap_or_else(|_| format!("{}/.pyenv", std::env::var("HOME").unwrap_or_default()));
    if let Ok(dir) = std::fs::read_dir(format!("{pyenv}/versions")) {
        let mut found: Vec<String> = dir
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|v| {
                v.strip_prefix("3.")
                    .and_then(|r| r.split('.').next())
                    .and_then(|m| m.parse::<u32>().ok())
                    .is_some_and(|m| (8..=13).contains(&m))
            })
            .collect();
        found.sort();
        candidates.extend(
            found
                .iter()
                .map(|v| format!("{pyenv}/versions/{v}/bin/python3")),
        );
    }
    for m in 8..=13 {
        candidates.push(format!("/usr/bin/python3.{m}"));
    }
    candidates.push("python3".into());
    let mut ran = Vec::new();
    for exe in &candidates {
        let exe = exe.as_str();
        let Ok(out) = Command::new(exe)
            .arg("-c")
            .arg(
                "import inspect, sys, toolcell_tools as t\n\
                 from toolcell_tools.docs import search\n\
                 print(sys.version_info[:2] >= (3, 8), inspect.signature(search), inspect.signature(t.get_user))",
            )
            .current_dir(tmp.path())
            .env("PYTHONPATH", tmp.path())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()
        else {
            continue;
        };
        assert!(
            out.status.success(),
            "{exe}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            // 3.8 spells Optional[str] out.
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .replace("Union[str, NoneType]", "Optional[str]"),
            "True (query: str, limit: int = 5) -> Any (id: int, from_: Optional[str] = None, class_: Literal['staff', 'guest'] = 'guest') -> Dict[str, Any]",
            "{exe}"
        );
        ran.push(exe);
    }
    assert!(ran.contains(&"python3"), "no python3 on PATH");
}

/// Property names that Python, R or JavaScript treat specially: every
/// Python keyword, its soft keywords, `__debug__`, builtins, names the stub
/// body uses, R's reserved words and JavaScript's.
const AWKWARD_NAMES: &[&str] = &[
    "False",
    "None",
    "True",
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "try",
    "while",
    "with",
    "yield",
    "match",
    "case",
    "type",
    "_",
    "__debug__",
    "print",
    "list",
    "str",
    "Any",
    "Optional",
    "_call",
    "_args",
    "self",
    "function",
    "NULL",
    "TRUE",
    "NA",
    "Inf",
    "c",
    "I",
    "is.null",
    "base",
    "delete",
    "new",
    "this",
    "then",
    "constructor",
    "__proto__",
];

#[test]
fn review_08_keywords_soft_keywords_debug_and_builtins_as_parameter_names_compile() {
    let mut props = serde_json::Map::new();
    for (i, name) in AWKWARD_NAMES.iter().enumerate() {
        props.insert(
            (*name).to_string(),
            json!({"type": "integer", "default": i}),
        );
    }
    let input = json!({"type": "object", "properties": props});
    let top: Arc<dyn DynTool> = Arc::new(echo("awkward", "Awkward names.", input.clone()));
    let sourced: Arc<dyn DynTool> = Arc::new(
        echo("srv.awkward", "Awkward names.", input)
            .in_namespace("srv")
            .unwrap(),
    );
    let tools = vec![top, sourced];
    assert!(
        toolcell_tools::screen::screen(&tools, &[])
            .dropped
            .is_empty()
    );
    let src = toolcell_stubs::python::stub_module(&tools).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("toolcell_tools.py"), &src).unwrap();
    let out = python(
        tmp.path(),
        "import inspect, toolcell_tools as t\n\
         sig = inspect.signature(t.awkward)\n\
         print(len(sig.parameters), sig.parameters['__debug___'].default, sig.parameters['None_'].default)\n\
         print(inspect.signature(t.srv.awkward) == sig)",
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{} 39 1\nTrue\n", AWKWARD_NAMES.len(),)
    );
    // R parses its module, JavaScript loads its own.
    let r = toolcell_stubs::r::stub_module(&tools, &[]).unwrap();
    let path = tmp.path().join("t.R");
    std::fs::write(&path, &r).unwrap();
    let expr = format!(
        "e <- new.env(); sys.source('{}', envir = e); stopifnot(length(formals(e$awkward)) == {}, length(formals(e$srv$awkward)) == {})",
        path.display(),
        AWKWARD_NAMES.len(),
        AWKWARD_NAMES.len()
    );
    let out = Command::new("Rscript")
        .args(["-e", &expr])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let js = toolcell_stubs::js::stub_module(&tools, &[]).unwrap();
    let path = tmp.path().join("t.js");
    std::fs::write(&path, &js).unwrap();
    let code = format!(
        "const m = require('{}'); if (typeof m.awkward !== 'function' || typeof m.srv.awkward !== 'function') process.exit(1)",
        path.display()
    );
    let out = Command::new("node").args(["-e", &code]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `anyOf` over four `$ref`s to the next level, `levels` deep.
fn exponential_schema(levels: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..levels {
        let next = format!("#/$defs/d{}", i + 1);
        defs.insert(
            format!("d{i}"),
            json!({"anyOf": [{"$ref": next}, {"$ref": next}, {"$ref": next}, {"$ref": next}]}),
        );
    }
    defs.insert(format!("d{levels}"), json!({"type": "string"}));
    json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs})
}

#[test]
fn review_08_an_exponential_schema_renders_within_a_work_budget() {
    let bomb = exponential_schema(12);
    assert!(bomb.to_string().len() < 1500);
    let started = std::time::Instant::now();
    let tool: Arc<dyn DynTool> = Arc::new(
        echo("deep", "Deep.", bomb.clone())
            .with_output_schema(bomb.clone())
            .unwrap(),
    );
    let tools = vec![tool];
    let params = schema::params(tools[0].as_ref());
    assert_eq!(params[0].hint, "Any");
    assert_eq!(
        schema::python_type_in(&bomb, &bomb["properties"]["x"]),
        "Any"
    );
    let py = toolcell_stubs::python::stub_module(&tools).unwrap();
    assert!(
        py.contains("def deep(x: Any = None) -> Dict[str, Any]:"),
        "{py}"
    );
    toolcell_stubs::r::stub_module(&tools, &[]).unwrap();
    toolcell_stubs::js::stub_module(&tools, &[]).unwrap();
    let d = toolcell_stubs::execute_code_description(&tools, &Default::default());
    assert!(d.contains("deep(x: Any = None)"), "{d}");
    // A shallow one still renders in full.
    let shallow = exponential_schema(3);
    assert_eq!(
        schema::python_type_in(&shallow, &shallow["properties"]["x"]),
        "str"
    );
    let took = started.elapsed();
    // Room for a debug build on a loaded machine; without the work budget
    // the 4^12 expansions take far longer.
    assert!(took < Duration::from_secs(6), "rendering took {took:?}");
}

#[test]
fn review_08_screen_leaves_out_the_later_of_two_tools_that_share_a_name_in_any_language() {
    let tool =
        |name: &str| -> Arc<dyn DynTool> { Arc::new(echo(name, "", json!({"type": "object"}))) };
    let sourced = |name: &str, ns: &str| -> Arc<dyn DynTool> {
        Arc::new(
            echo(name, "", json!({"type": "object"}))
                .in_namespace(ns)
                .unwrap(),
        )
    };
    let tools = vec![
        tool("create_ticket"),
        sourced("srv.get-user", "srv"),
        sourced("srv.get_user", "srv"),
        sourced("srv.ok", "srv"),
        // R: both `c_`; JavaScript: both `delete_`; Python: distinct.
        tool("c"),
        tool("c_"),
        tool("delete"),
        tool("delete_"),
        // A source whose module would be the top-level tool's name.
        sourced("create_ticket.x", "create_ticket"),
    ];
    // Unscreened, the generators refuse the whole module.
    assert!(toolcell_stubs::python::stub_module(&tools[..3]).is_err());
    assert!(toolcell_stubs::r::stub_module(&tools[4..6], &[]).is_err());
    assert!(toolcell_stubs::js::stub_module(&tools[6..8], &[]).is_err());
    let down = vec![
        toolcell_tools::names::Unavailable {
            namespace: "create_ticket".into(),
            message: "down".into(),
        },
        toolcell_tools::names::Unavailable {
            namespace: "billing".into(),
            message: "down".into(),
        },
    ];
    let screened = toolcell_tools::screen::screen(&tools, &down);
    let kept: Vec<&str> = screened.tools.iter().map(|t| t.name()).collect();
    assert_eq!(
        kept,
        ["create_ticket", "c", "delete", "srv.get-user", "srv.ok"]
    );
    let dropped = screened.dropped.join("\n");
    for needle in [
        "tool `srv.get_user` left out: its function would have the Python name `get_user`, which `srv.get-user` has already",
        "tool `c_` left out: its function would have the R name `c_`, which `c` has already",
        "tool `delete_` left out: its function would have the JavaScript name `delete_`, which `delete` has already",
        "tool `create_ticket.x` left out: the module of its source `create_ticket` would have the Python name `create_ticket`, which `create_ticket` has already",
        "source `create_ticket` left out: its module would have the Python name `create_ticket`, which `create_ticket` has already",
    ] {
        assert!(dropped.contains(needle), "{needle} not in:\n{dropped}");
    }
    assert_eq!(screened.unavailable.len(), 1);
    assert_eq!(screened.unavailable[0].namespace, "billing");
    toolcell_stubs::python::stub_module_with(&screened.tools, &screened.unavailable).unwrap();
    toolcell_stubs::r::stub_module(&screened.tools, &screened.unavailable).unwrap();
    toolcell_stubs::js::stub_module(&screened.tools, &screened.unavailable).unwrap();
    // Registration refuses what the screen would leave out.
    let mut reg = ToolRegistry::empty();
    reg.add(tool("c")).unwrap();
    let err = reg.add(tool("c_")).unwrap_err().to_string();
    assert!(err.contains("R name `c_`"), "{err}");
}
