//! A tool's JSON Schemas read for the stub modules: local `$ref`s resolved,
//! Python type hints and result shapes rendered within a budget, and the
//! parameters ([`Param`]) in the order a signature lists them.

use serde_json::{Map, Value};

use crate::tool::DynTool;

/// How many `$ref`s or nested schemas the renderers follow before giving
/// up (`Any`): bounds recursive schemas.
const MAX_DEPTH: usize = 32;

/// `schema` with its local `$ref` chain (`#/$defs/…`, `#/definitions/…`, any
/// `#/…` pointer into `root`) followed. A reference that does not resolve,
/// is not local or loops is returned as is.
pub fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let mut cur = schema;
    for _ in 0..MAX_DEPTH {
        let Some(r) = cur.get("$ref").and_then(Value::as_str) else {
            return cur;
        };
        let Some(pointer) = r.strip_prefix('#') else {
            return cur;
        };
        let pointer = pointer.replace("%25", "%").replace("%22", "\"");
        match root.pointer(&pointer) {
            Some(next) => cur = next,
            None => return cur,
        }
    }
    cur
}

/// How many schema nodes one rendering may visit (a type hint, a result
/// shape, or all the parameters of one tool together) before the rest
/// renders as `Any`: `anyOf` alternatives that `$ref` each other can
/// describe exponentially many paths in a few hundred bytes, and a tool
/// list from outside must not cost more than its own tools.
pub const TYPE_RENDER_BUDGET: usize = 4096;

/// The work left for one rendering (see [`TYPE_RENDER_BUDGET`]).
#[derive(Debug)]
struct Budget(usize);

impl Budget {
    fn new() -> Self {
        Self(TYPE_RENDER_BUDGET)
    }

    /// Takes one unit of work; `false` once there is none left.
    fn take(&mut self) -> bool {
        if self.0 == 0 {
            return false;
        }
        self.0 -= 1;
        true
    }
}

/// A JSON Schema fragment rendered as a Python type hint (`typing` names,
/// valid on Python 3.8), local `$ref`s resolved against the fragment itself.
/// A schema too large or too branched to render within
/// [`TYPE_RENDER_BUDGET`] is `Any` where the budget ran out.
pub fn python_type(schema: &Value) -> String {
    python_type_in(schema, schema)
}

/// [`python_type`] of `schema`, a part of `root` whose `$ref`s point into
/// `root`.
pub fn python_type_in(root: &Value, schema: &Value) -> String {
    hint(root, schema, 0, &mut Budget::new())
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

fn hint(root: &Value, schema: &Value, depth: usize, budget: &mut Budget) -> String {
    if depth > MAX_DEPTH || !budget.take() {
        return "Any".into();
    }
    let schema = resolve(root, schema);
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        // typing.Literal hashes its values: only scalars.
        if values.is_empty() || !values.iter().all(is_scalar) {
            return "Any".into();
        }
        let lits: Vec<String> = values.iter().map(python_literal).collect();
        return format!("Literal[{}]", lits.join(", "));
    }
    if let Some(c) = schema.get("const") {
        if !is_scalar(c) {
            return "Any".into();
        }
        return format!("Literal[{}]", python_literal(c));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = schema.get(key).and_then(Value::as_array) {
            let mut parts = Vec::with_capacity(alts.len().min(64));
            for a in alts {
                let part = hint(root, a, depth + 1, budget);
                // `Any` absorbs the union: the other alternatives need no work.
                if part == "Any" {
                    return part;
                }
                parts.push(part);
            }
            return union(parts);
        }
    }
    match schema.get("type") {
        Some(Value::String(t)) => scalar_type(root, t, schema, depth, budget),
        Some(Value::Array(ts)) => union(
            ts.iter()
                .filter_map(Value::as_str)
                .map(|t| scalar_type(root, t, schema, depth, budget))
                .collect(),
        ),
        _ => "Any".to_string(),
    }
}

fn scalar_type(root: &Value, t: &str, schema: &Value, depth: usize, budget: &mut Budget) -> String {
    match t {
        "string" => "str".into(),
        "integer" => "int".into(),
        "number" => "float".into(),
        "boolean" => "bool".into(),
        "null" => "None".into(),
        "array" => match schema.get("items") {
            Some(items) if items.is_object() => {
                format!("List[{}]", hint(root, items, depth + 1, budget))
            }
            _ => "List[Any]".into(),
        },
        "object" => "Dict[str, Any]".into(),
        _ => "Any".into(),
    }
}

fn union(mut parts: Vec<String>) -> String {
    let mut seen = std::collections::HashSet::new();
    parts.retain(|p| seen.insert(p.clone()));
    let has_none = parts.iter().any(|p| p == "None");
    parts.retain(|p| p != "None");
    if parts.iter().any(|p| p == "Any") {
        return "Any".into();
    }
    if parts.len() > 1 && parts.iter().all(|p| p.starts_with("Literal[")) {
        let lits: Vec<&str> = parts
            .iter()
            .map(|p| &p["Literal[".len()..p.len() - 1])
            .collect();
        parts = vec![format!("Literal[{}]", lits.join(", "))];
    }
    let inner = match parts.len() {
        0 => return "None".into(),
        1 => parts.remove(0),
        _ => format!("Union[{}]", parts.join(", ")),
    };
    if has_none {
        format!("Optional[{inner}]")
    } else {
        inner
    }
}

/// A JSON value as a Python literal.
pub fn python_literal(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        // JSON string escapes are valid Python escapes for what serde emits.
        Value::String(s) => serde_json::to_string(s).unwrap_or_else(|_| "''".into()),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(python_literal).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!(
                    "{}: {}",
                    python_literal(&Value::String(k.clone())),
                    python_literal(v)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A compact description of a result shape, e.g.
/// `{content: str, total_lines: int, truncated: bool}`; local `$ref`s are
/// resolved.
pub fn shape(schema: &Value) -> String {
    shape_in(schema, schema, 0, &mut Budget::new())
}

fn shape_in(root: &Value, schema: &Value, depth: usize, budget: &mut Budget) -> String {
    if depth > MAX_DEPTH / 4 || !budget.take() {
        return "...".into();
    }
    let schema = resolve(root, schema);
    if schema.get("type").and_then(Value::as_str) == Some("object")
        && let Some(props) = schema.get("properties").and_then(Value::as_object)
    {
        let fields: Vec<String> = props
            .iter()
            .map(|(k, v)| format!("{k}: {}", shape_in(root, v, depth + 1, budget)))
            .collect();
        return format!("{{{}}}", fields.join(", "));
    }
    if schema.get("type").and_then(Value::as_str) == Some("array")
        && let Some(items) = schema.get("items").filter(|i| i.is_object())
    {
        return format!("[{}]", shape_in(root, items, depth + 1, budget));
    }
    let t = hint(root, schema, 0, budget);
    match t.as_str() {
        "Dict[str, Any]" => "dict".into(),
        _ => t,
    }
}

/// The return annotation of a tool's stub function for its output schema:
/// `Dict[str, Any]` for an object, the schema's type hint otherwise, `Any`
/// when the shape is not declared.
pub fn return_hint(output: &Value) -> String {
    python_type(output)
}

/// One parameter of a tool, as the stub and descriptions render it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Param {
    /// The Python parameter name ([`names::python_parameter_name`] of `key`).
    ///
    /// [`names::python_parameter_name`]: crate::names::python_parameter_name
    pub name: String,
    /// The property name the tool receives.
    pub key: String,
    /// The Python type hint.
    pub hint: String,
    /// The default, if the parameter is optional.
    pub default: Option<Value>,
    /// The parameter's description.
    pub description: String,
    /// Optional without a declared default, and its schema does not admit
    /// null: when left at `None` the stub does not send it.
    pub omit_if_none: bool,
}

impl Param {
    /// `name: hint` or `name: hint = default`, as in a signature.
    pub fn python(&self) -> String {
        match &self.default {
            None => format!("{}: {}", self.name, self.hint),
            Some(d) => format!("{}: {} = {}", self.name, self.hint, python_literal(d)),
        }
    }
}

fn admits_none(hint: &str) -> bool {
    hint == "None" || hint.starts_with("Optional[")
}

/// The parameters of a tool from its argument schema (local `$ref`s
/// resolved): required ones first, then optional ones, each group in schema
/// order. An optional parameter without a declared default defaults to
/// `None` (its hint `Optional[…]`). All the hints of one tool share one
/// [`TYPE_RENDER_BUDGET`]: once it is spent, the remaining hints are `Any`.
pub fn params(tool: &dyn DynTool) -> Vec<Param> {
    params_of(&tool.args_schema())
}

/// [`params`] of an argument schema.
pub fn params_of(root: &Value) -> Vec<Param> {
    let schema = resolve(root, root);
    let required: std::collections::HashSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let empty = Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut req = Vec::new();
    let mut opt = Vec::new();
    let mut budget = Budget::new();
    for (key, prop) in props {
        let is_required = required.contains(key.as_str());
        let resolved = resolve(root, prop);
        let mut rendered = hint(root, prop, 0, &mut budget);
        let declared = prop
            .get("default")
            .or_else(|| resolved.get("default"))
            .cloned();
        let omit_if_none = !is_required && declared.is_none() && !admits_none(&rendered);
        if omit_if_none && rendered != "Any" {
            rendered = format!("Optional[{rendered}]");
        }
        let param = Param {
            name: crate::names::python_parameter_name(key),
            key: key.clone(),
            hint: rendered,
            default: if is_required {
                None
            } else {
                Some(declared.unwrap_or(Value::Null))
            },
            description: prop
                .get("description")
                .or_else(|| resolved.get("description"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            omit_if_none,
        };
        if is_required {
            req.push(param);
        } else {
            opt.push(param);
        }
    }
    req.extend(opt);
    req
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_types_from_schemas() {
        assert_eq!(python_type(&json!({"type":"string"})), "str");
        assert_eq!(
            python_type(&json!({"type":["integer","null"]})),
            "Optional[int]"
        );
        assert_eq!(
            python_type(&json!({"type":"array","items":{"type":"string"}})),
            "List[str]"
        );
        assert_eq!(
            python_type(&json!({"type":"string","enum":["a","b"]})),
            "Literal[\"a\", \"b\"]"
        );
        assert_eq!(
            python_type(&json!({"anyOf":[{"type":"string"},{"type":"null"}]})),
            "Optional[str]"
        );
        assert_eq!(python_type(&json!({})), "Any");
        assert_eq!(
            python_type(&json!({"oneOf":[{"const":"a"},{"const":"b"}]})),
            "Literal[\"a\", \"b\"]"
        );
    }

    #[test]
    fn literals_are_python() {
        assert_eq!(python_literal(&json!(null)), "None");
        assert_eq!(python_literal(&json!(false)), "False");
        assert_eq!(python_literal(&json!("a\"b")), "\"a\\\"b\"");
        assert_eq!(python_literal(&json!(2000)), "2000");
    }
}
