//! Tools from outside the registry (a `serve` client's, an MCP server's),
//! carried by each request: a live kernel gets them with its next cell and
//! keeps its state; a namespaced source is a submodule; a source that is
//! down raises `ToolError` with its reason; a request's `tools` narrows
//! them; they leave with a cell that no longer carries them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use crate::common::{Fixture, assert_success, show};
use serde_json::{Value, json};
use toolcell_host::ExecuteRequest;
use toolcell_kernel::ExtraTools;
use toolcell_tools::names::Unavailable;
use toolcell_tools::{DynTool, SchemaTool};

fn ticket_tool() -> Arc<dyn DynTool> {
    Arc::new(
        SchemaTool::new(
            "create-ticket",
            "Open a ticket in the tracker.",
            json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string", "description": "One line."},
                    "priority": {"type": "string", "enum": ["low", "high"], "default": "low"}
                },
                "required": ["title"]
            }),
            |args: Value, _cx| async move {
                Ok(json!({"id": 7, "title": args["title"], "priority": args.get("priority")}))
            },
        )
        .unwrap(),
    )
}

fn crm_find() -> Arc<dyn DynTool> {
    Arc::new(
        SchemaTool::new(
            "crm.find",
            "Find customers.",
            json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
            |args: Value, _cx| async move {
                Ok(json!([format!(
                    "found {}",
                    args["q"].as_str().unwrap_or("")
                )]))
            },
        )
        .unwrap()
        .in_namespace("crm")
        .unwrap(),
    )
}

fn extras(generation: u64) -> Arc<ExtraTools> {
    let mut e = ExtraTools::new(vec![ticket_tool(), crm_find()], generation);
    e.unavailable.push(Unavailable {
        namespace: "billing".into(),
        message: "MCP server billing failed to start: exit status 1".into(),
    });
    Arc::new(e)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_tools_arrive_and_leave_with_the_state_kept() {
    let fx = Fixture::new();
    let r = fx.reg.execute(ExecuteRequest::new("x = 41")).await;
    assert_success(&r);
    let kernel = r.kernel.id.clone();

    // They arrive with the next cell: same kernel, state kept.
    let code = r#"
import inspect, toolcell_tools
import toolcell_tools.crm
from toolcell_tools.crm import find
t = create_ticket("disk full", priority="high")
print(x + 1, t["id"], t["priority"])
print(find(q="acme"), crm.find("bob"), toolcell_tools.crm.find is find)
print(inspect.signature(create_ticket))
try:
    toolcell_tools.billing.invoice(1)
except ToolError as e:
    print("billing:", e)
"#;
    let r = fx
        .reg
        .execute(ExecuteRequest::new(code).extra_tools(extras(1)))
        .await;
    assert_success(&r);
    assert_eq!(r.kernel.id, kernel, "{}", show(&r));
    assert!(!r.kernel.state_reset);
    let lines: Vec<&str> = r.output.lines().collect();
    assert_eq!(lines[0], "42 7 high", "{}", show(&r));
    assert_eq!(
        lines[1],
        "['found acme'] ['found bob'] True",
        "{}",
        show(&r)
    );
    assert_eq!(
        lines[2],
        "(title: str, priority: Literal['low', 'high'] = 'low') -> Any",
        "{}",
        show(&r)
    );
    assert_eq!(
        lines[3],
        "billing: MCP server billing failed to start: exit status 1"
    );
    assert_eq!(r.tool_calls_made, 3);

    // Same set again: no reload needed, still callable; a new generation
    // reloads and keeps working.
    for generation in [1, 2] {
        let r = fx
            .reg
            .execute(
                ExecuteRequest::new("print(create_ticket('again')['id'], x)")
                    .extra_tools(extras(generation)),
            )
            .await;
        assert_success(&r);
        assert_eq!(r.output, "7 41\n", "{}", show(&r));
    }

    // Narrowed by the request's tools: only the crm source is left.
    let mut wanted: Vec<String> = fx.reg.options().tools.clone();
    wanted.push("crm.*".into());
    let r = fx
        .reg
        .execute(
            ExecuteRequest::new(
                "print(crm.find('z'))\ntry:\n    create_ticket('x')\nexcept NameError as e:\n    print('gone:', e)",
            )
            .tools(wanted)
            .extra_tools(extras(2)),
        )
        .await;
    assert_success(&r);
    assert_eq!(r.kernel.id, kernel, "{}", show(&r));
    assert_eq!(
        r.output,
        "['found z']\ngone: name 'create_ticket' is not defined\n",
        "{}",
        show(&r)
    );

    // A cell without them: gone from the namespace and the module, the
    // state still there; importing one gets the hint listing what is there.
    let r = fx
        .reg
        .execute(ExecuteRequest::new(
            "import sys\nprint(x, 'create_ticket' in globals(), 'toolcell_tools.crm' in sys.modules)\nfrom toolcell_tools import create_ticket",
        ))
        .await;
    assert_eq!(r.kernel.id, kernel, "{}", show(&r));
    assert!(r.output.starts_with("41 False False\n"), "{}", show(&r));
    let hint = r.hint.clone().unwrap_or_default();
    assert!(hint.contains("read_file"), "{}", show(&r));
    assert!(!hint.contains("create_ticket, "), "{}", show(&r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_naming_an_unknown_outside_tool_is_refused() {
    let fx = Fixture::new();
    let r = fx
        .reg
        .execute(
            ExecuteRequest::new("1")
                .tools(["read_file", "crm.nothing"])
                .extra_tools(extras(1)),
        )
        .await;
    assert_eq!(r.status, toolcell_kernel::Status::Error, "{}", show(&r));
    assert!(
        r.error.as_deref().unwrap_or("").contains("`crm.nothing`"),
        "{}",
        show(&r)
    );
}

/// The same for R and JavaScript kernels: the new stub module comes with
/// the cell's `execute` (its `stubs` field), the state is kept, a
/// namespaced source is `crm$find(...)` / `crm.find({...})`, a source that
/// is down stops with `ToolError`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_tools_reach_r_and_javascript_kernels() {
    use toolcell_kernel::Language;
    for (prog, install) in [
        (
            "Rscript",
            "scripts/test-deps.sh (apt-get install r-base-core r-cran-jsonlite)",
        ),
        ("node", "apt-get install nodejs (node 18 or later)"),
    ] {
        let ok = std::process::Command::new(prog)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(ok, "{prog} is not installed; install it with: {install}");
    }
    let fx = Fixture::new();
    for (lang, set, code, want) in [
        (
            Language::R,
            "x <- 41",
            "t <- create_ticket(title = 'disk full', priority = 'high')\n\
             cat(x + 1, t$id, t$priority, crm$find(q = 'acme')[[1]], '\\n')\n\
             e <- tryCatch(billing$invoice(), ToolError = function(e) conditionMessage(e))\n\
             cat(e, '\\n')",
            "42 7 high found acme \nMCP server billing failed to start: exit status 1 \n",
        ),
        (
            Language::JavaScript,
            "var x = 41",
            "const t = await create_ticket({title: 'disk full', priority: 'high'})\n\
             console.log(x + 1, t.id, t.priority, (await crm.find({q: 'acme'}))[0])\n\
             try { await billing.invoice({}) } catch (e) { console.log(e instanceof ToolError, e.message) }",
            "42 7 high found acme\ntrue MCP server billing failed to start: exit status 1\n",
        ),
    ] {
        let r = fx
            .reg
            .execute(ExecuteRequest::new(set).language(lang))
            .await;
        assert_success(&r);
        let kernel = r.kernel.id.clone();
        let r = fx
            .reg
            .execute(
                ExecuteRequest::new(code)
                    .language(lang)
                    .extra_tools(extras(1)),
            )
            .await;
        assert_success(&r);
        assert_eq!(r.kernel.id, kernel, "{lang}: {}", show(&r));
        assert_eq!(r.output, want, "{lang}: {}", show(&r));
        assert_eq!(r.tool_calls_made, 2, "{lang}: {}", show(&r));
    }
}
