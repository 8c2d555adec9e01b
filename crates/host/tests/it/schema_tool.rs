//! A tool defined at run time from a JSON Schema and a Rust closure, called
//! from real cells: good arguments return the closure's result (the
//! closure sees the original property keys), bad ones raise `ToolError`
//! naming the JSON pointer without running it or spending budget, and four
//! threads of one cell call it at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{assert_success, show};
use serde_json::{Value, json};
use toolcell_host::{ExecuteRequest, Registry};
use toolcell_tools::{SchemaTool, ToolRegistry};

#[derive(Default)]
struct Counters {
    calls: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

fn lookup_tool(counters: Arc<Counters>) -> SchemaTool {
    SchemaTool::new(
        "get-user",
        "Look users up by id.",
        json!({
            "type": "object",
            "properties": {
                "ids": {"type": "array", "items": {"$ref": "#/$defs/Id"}},
                "from": {"type": "string", "enum": ["ldap", "local"]},
                "pause_ms": {"type": "integer", "minimum": 0, "maximum": 2000, "default": 0}
            },
            "required": ["ids"],
            "additionalProperties": false,
            "$defs": {"Id": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}
        }),
        move |args: Value, _cx| {
            let c = Arc::clone(&counters);
            async move {
                c.calls.fetch_add(1, Ordering::SeqCst);
                let now = c.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                c.max_in_flight.fetch_max(now, Ordering::SeqCst);
                let pause = args["pause_ms"].as_u64().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(pause)).await;
                c.in_flight.fetch_sub(1, Ordering::SeqCst);
                let names: Vec<String> = args["ids"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|i| format!("user{}", i["id"]))
                    .collect();
                Ok(json!({"names": names, "source": args.get("from")}))
            }
        },
    )
    .unwrap()
    .with_output_schema(json!({
        "type": "object",
        "properties": {"names": {"type": "array", "items": {"type": "string"}}, "source": {}}
    }))
    .unwrap()
}

fn registry(tmp: &std::path::Path, counters: &Arc<Counters>, budget: u32) -> Registry {
    std::fs::create_dir_all(tmp.join("work")).unwrap();
    let mut opts = common::opts(tmp);
    opts.tools = vec!["get-user".into(), "read_file".into()];
    opts.max_tool_calls = budget;
    let mut tools = ToolRegistry::builtin().unwrap();
    tools
        .add(Arc::new(lookup_tool(Arc::clone(counters))))
        .unwrap();
    Registry::with_tools(opts, tools, None).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_calls_a_closure_tool_and_bad_arguments_cost_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let counters = Arc::new(Counters::default());
    let reg = registry(tmp.path(), &counters, 2);

    // Good arguments: the closure's result, the original key `from` sent.
    let r = reg
        .execute(ExecuteRequest::new(
            "r = get_user([{'id': 1}, {'id': 2}], from_='ldap')\nprint(r['names'], r['source'])",
        ))
        .await;
    assert_success(&r);
    assert_eq!(r.output, "['user1', 'user2'] ldap\n", "{}", show(&r));
    assert_eq!(r.tool_calls_made, 1);

    // Bad arguments: ToolError naming the pointer, the closure not run, no
    // budget spent (both good calls of this cell's budget of 2 still run).
    let r = reg
        .execute(ExecuteRequest::new(
            r#"
from toolcell_tools import ToolError, get_user
for bad in ([{'id': 1}, {'id': 'x'}], [{}]):
    try:
        get_user(bad)
    except ToolError as e:
        print(e.code, '|', e)
try:
    get_user([], from_='nis')
except ToolError as e:
    print(e.code, '|', e)
print(get_user([{'id': 3}])['names'], get_user([])['names'])
"#,
        ))
        .await;
    assert_success(&r);
    let lines: Vec<&str> = r.output.lines().collect();
    assert_eq!(lines.len(), 4, "{}", show(&r));
    assert_eq!(
        lines[0],
        r#"bad_args | get-user: bad arguments: /ids/1/id: "x" is not of type "integer""#
    );
    assert_eq!(
        lines[1],
        r#"bad_args | get-user: bad arguments: /ids/0: "id" is a required property"#
    );
    assert!(
        lines[2].starts_with(r#"bad_args | get-user: bad arguments: /from: "nis" is not one of"#),
        "{}",
        lines[2]
    );
    assert_eq!(lines[3], "['user3'] []");
    assert_eq!(r.tool_calls_made, 2, "{}", show(&r));
    assert_eq!(counters.calls.load(Ordering::SeqCst), 3);

    // The budget really is 2: a third good call is refused.
    let r = reg
        .execute(ExecuteRequest::new(
            "for i in range(3): get_user([{'id': i}])",
        ))
        .await;
    assert!(show(&r).contains("budget"), "{}", show(&r));
    assert_eq!(r.tool_calls_made, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_threads_of_a_cell_call_it_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let counters = Arc::new(Counters::default());
    let reg = registry(tmp.path(), &counters, 50);
    let r = reg
        .execute(ExecuteRequest::new(
            r#"
import threading
from toolcell_tools import get_user
results, errors = {}, []
def work(t):
    try:
        for i in range(3):
            results[(t, i)] = get_user([{'id': 10 * t + i}], pause_ms=300)['names']
    except Exception as e:
        errors.append(repr(e))
ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
assert not errors, errors
assert all(results[(t, i)] == ['user%d' % (10 * t + i)] for t in range(4) for i in range(3)), results
print(len(results))
"#,
        ))
        .await;
    assert_success(&r);
    assert_eq!(r.output, "12\n", "{}", show(&r));
    assert_eq!(r.tool_calls_made, 12);
    assert_eq!(counters.calls.load(Ordering::SeqCst), 12);
    // The calls ran side by side, not one after another.
    assert!(
        counters.max_in_flight.load(Ordering::SeqCst) >= 2,
        "max in flight {}",
        counters.max_in_flight.load(Ordering::SeqCst)
    );
}
