//! HTML → markdown and `<title>` for `web_extract`.
//!
//! The converter is `htmd` (chosen over `html2md`, which is GPL-licensed
//! and little maintained, and `fast_html2md`, which pulls in `lol_html` and
//! an async streaming stack we do not need): Apache-2.0, actively
//! maintained, parses with html5ever (the spec-compliant parser Servo uses)
//! so broken real-world markup still yields a tree, and exposes that tree so
//! the title comes from the same parse.
//!
//! Absurdly deep documents are dangerous twice: html5ever's tree builder
//! slows down with the depth of open elements (tens of seconds for 200 000
//! nested `<div>`s), and htmd walks the tree recursively, so it could
//! exhaust a thread's stack — an abort, not a panic. [`convert`] therefore
//! estimates the nesting with a linear scan first and, past [`MAX_DEPTH`],
//! strips the markup to plain text without building a tree at all; it also
//! checks the real depth after parsing. Callers also run it on a thread with
//! a large stack (see `extract.rs`).

use std::rc::Rc;

use markup5ever_rcdom::{Node, NodeData};

/// Deeper documents are rendered as plain text instead of markdown.
pub(super) const MAX_DEPTH: usize = 400;

/// Elements whose content is never page text.
const SKIPPED: &[&str] = &[
    "head", "script", "style", "noscript", "template", "iframe", "svg", "canvas", "object", "embed",
];

/// A converted page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Converted {
    /// The document's `<title>`, whitespace collapsed; empty if none.
    pub title: String,
    /// The body as markdown.
    pub markdown: String,
}

thread_local! {
    static CONVERTER: htmd::HtmlToMarkdown = htmd::HtmlToMarkdown::builder()
        .skip_tags(SKIPPED.to_vec())
        .build();
}

/// Converts an HTML document to markdown and extracts its title.
pub(super) fn convert(html: &str) -> Converted {
    if estimated_depth(html) > MAX_DEPTH {
        return Converted {
            title: raw_title(html),
            markdown: strip_markup(html),
        };
    }
    CONVERTER.with(|conv| {
        let tree = match conv.html_to_tree(html) {
            Ok(t) => t,
            // html5ever recovers from any markup; this is an I/O error type
            // in the API only. Fall back to the raw text rather than fail.
            Err(_) => {
                return Converted {
                    title: String::new(),
                    markdown: html.to_string(),
                };
            }
        };
        let title = title(&tree);
        let markdown = if depth(&tree) > MAX_DEPTH {
            plain_text(&tree)
        } else {
            conv.tree_to_markdown(&tree)
        };
        Converted { title, markdown }
    })
}

/// The element name of `node`, if it is an element.
fn element_name(node: &Node) -> Option<&str> {
    match &node.data {
        NodeData::Element { name, .. } => Some(&name.local),
        _ => None,
    }
}

fn is_html_element(node: &Node) -> bool {
    matches!(&node.data, NodeData::Element { name, .. } if &*name.ns == "http://www.w3.org/1999/xhtml")
}

/// The depth of the tree, measured without recursion.
fn depth(root: &Rc<Node>) -> usize {
    let mut max = 0;
    let mut stack: Vec<(Rc<Node>, usize)> = vec![(Rc::clone(root), 0)];
    while let Some((node, d)) = stack.pop() {
        max = max.max(d);
        for child in node.children.borrow().iter() {
            stack.push((Rc::clone(child), d + 1));
        }
    }
    max
}

/// The first HTML `<title>` in document order (not an SVG `<title>`).
fn title(root: &Rc<Node>) -> String {
    let mut stack: Vec<Rc<Node>> = vec![Rc::clone(root)];
    while let Some(node) = stack.pop() {
        if element_name(&node) == Some("title") && is_html_element(&node) {
            let mut text = String::new();
            for child in node.children.borrow().iter() {
                if let NodeData::Text { contents } = &child.data {
                    text.push_str(&contents.borrow());
                }
            }
            return collapse_whitespace(&text);
        }
        // Reverse so the first child is popped first: document order.
        for child in node.children.borrow().iter().rev() {
            stack.push(Rc::clone(child));
        }
    }
    String::new()
}

/// Text of the document outside [`SKIPPED`] elements, one line per text
/// run, gathered without recursion.
fn plain_text(root: &Rc<Node>) -> String {
    let mut out = String::new();
    let mut stack: Vec<Rc<Node>> = vec![Rc::clone(root)];
    while let Some(node) = stack.pop() {
        match &node.data {
            NodeData::Text { contents } => {
                let t = collapse_whitespace(&contents.borrow());
                if !t.is_empty() {
                    out.push_str(&t);
                    out.push('\n');
                }
            }
            NodeData::Element { name, .. } if SKIPPED.contains(&&*name.local) => {}
            _ => {
                for child in node.children.borrow().iter().rev() {
                    stack.push(Rc::clone(child));
                }
            }
        }
    }
    out.trim_end().to_string()
}

/// Elements that never have content or are usually closed implicitly:
/// not counted by [`estimated_depth`].
const NOT_NESTING: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr", "p", "li", "dt", "dd", "option", "tr", "td", "th", "tbody", "thead", "tfoot",
];

/// The lowercased tag name starting at `s` (just after `<` or `</`).
fn tag_name(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(16)
        .collect::<String>()
        .to_ascii_lowercase()
}

/// An upper estimate of how deeply elements nest, from one linear scan of
/// the markup: start tags of elements that can nest count +1, end tags -1.
fn estimated_depth(html: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        if let Some(after) = rest.strip_prefix('/') {
            if after.starts_with(|c: char| c.is_ascii_alphabetic()) {
                depth = depth.saturating_sub(1);
            }
            continue;
        }
        if !rest.starts_with(|c: char| c.is_ascii_alphabetic()) {
            continue;
        }
        let name = tag_name(rest);
        let self_closing = rest.find('>').is_some_and(|end| rest[..end].ends_with('/'));
        if !self_closing && !NOT_NESTING.contains(&name.as_str()) {
            depth += 1;
            max = max.max(depth);
        }
    }
    max
}

/// The text of the first `<title>` element, found without parsing.
fn raw_title(html: &str) -> String {
    let lower = html.to_ascii_lowercase();
    let Some(open) = lower.find("<title") else {
        return String::new();
    };
    let Some(start) = lower[open..].find('>').map(|i| open + i + 1) else {
        return String::new();
    };
    let end = lower[start..]
        .find("</title")
        .map_or(html.len(), |i| start + i);
    collapse_whitespace(&decode_entities(html.get(start..end).unwrap_or("")))
}

/// Plain text of markup without building a tree: tags removed, the content
/// of [`SKIPPED`] elements dropped, a line break at block boundaries.
fn strip_markup(html: &str) -> String {
    let lower = html.to_ascii_lowercase();
    let mut out = String::new();
    let mut pos = 0;
    while let Some(i) = lower[pos..].find('<').map(|i| pos + i) {
        out.push_str(&html[pos..i]);
        let after = &lower[i + 1..];
        if after.starts_with("!--") {
            pos = after.find("-->").map_or(html.len(), |e| i + 1 + e + 3);
            continue;
        }
        if !after.starts_with(|c: char| c.is_ascii_alphabetic() || matches!(c, '/' | '!' | '?')) {
            // A bare `<` in text.
            out.push('<');
            pos = i + 1;
            continue;
        }
        let name = tag_name(after.trim_start_matches('/'));
        let Some(close) = after.find('>').map(|e| i + 1 + e + 1) else {
            pos = html.len();
            break;
        };
        pos = close;
        if !after.starts_with('/') && SKIPPED.contains(&name.as_str()) {
            let end_tag = format!("</{name}");
            pos = lower[pos..]
                .find(&end_tag)
                .and_then(|e| lower[pos + e..].find('>').map(|g| pos + e + g + 1))
                .unwrap_or(html.len());
        }
        if matches!(
            name.as_str(),
            "p" | "div"
                | "br"
                | "li"
                | "tr"
                | "h1"
                | "h2"
                | "h3"
                | "h4"
                | "h5"
                | "h6"
                | "section"
                | "article"
                | "pre"
                | "blockquote"
                | "table"
        ) {
            out.push('\n');
        } else {
            out.push(' ');
        }
    }
    out.push_str(html.get(pos..).unwrap_or(""));
    let text = decode_entities(&out);
    text.lines()
        .map(collapse_whitespace)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The common named and numeric character references decoded.
pub(super) fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&apos;", "'")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&")
}

/// Runs of whitespace become one space; ends trimmed.
pub(super) fn collapse_whitespace(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn title_and_markdown() {
        let c = convert(
            "<html><head><title>  My\n Page </title><style>p{}</style></head>\
             <body><h1>Head</h1><p>Some <b>bold</b> and <a href=\"/x\">link</a>.</p>\
             <script>var secret = 1;</script><ul><li>one</li><li>two</li></ul></body></html>",
        );
        assert_eq!(c.title, "My Page");
        assert!(c.markdown.contains("# Head"), "{}", c.markdown);
        assert!(c.markdown.contains("**bold**"), "{}", c.markdown);
        assert!(c.markdown.contains("[link](/x)"), "{}", c.markdown);
        assert!(c.markdown.contains("one") && c.markdown.contains("two"));
        assert!(!c.markdown.contains("secret"), "{}", c.markdown);
        assert!(!c.markdown.contains("p{}"), "{}", c.markdown);
        assert!(!c.markdown.contains("My Page"), "{}", c.markdown);
    }

    #[test]
    fn svg_title_is_not_the_page_title() {
        let c = convert("<body><svg><title>icon</title></svg><p>x</p></body>");
        assert_eq!(c.title, "");
    }

    #[test]
    fn deep_trees_the_estimate_misses_fall_back_to_text() {
        // Each level is table > tbody > tr > td in the tree but counts once
        // in the estimate: the post-parse depth check catches it.
        let n = MAX_DEPTH / 2;
        let html = format!(
            "<title>T</title>{}deep text{}",
            "<table><tr><td>".repeat(n),
            "</td></tr></table>".repeat(n)
        );
        assert!(estimated_depth(&html) <= MAX_DEPTH);
        let c = convert(&html);
        assert_eq!(c.title, "T");
        assert_eq!(c.markdown, "deep text");
    }

    #[test]
    fn depth_estimate_ignores_implicitly_closed_and_void_tags() {
        assert_eq!(
            estimated_depth("<div><p>a<p>b<br><img src=x/></div><div>c</div>"),
            1
        );
        assert_eq!(estimated_depth("<a><b><c></c></b></a>"), 3);
        assert_eq!(estimated_depth("<!-- <x> --> 1 < 2"), 1);
    }

    #[test]
    fn very_deep_markup_is_stripped_without_parsing() {
        let n = 100_000;
        let html = format!(
            "<head><title>Deep &amp; dark</title><script>var x = '<b>';</script></head>{}\
             <!-- a <comment> --><p>bottom &lt;here&gt; 1 < 2</p>{}",
            "<div>".repeat(n),
            "</div>".repeat(n)
        );
        let c = convert(&html);
        assert_eq!(c.title, "Deep & dark");
        assert_eq!(c.markdown, "bottom <here> 1 < 2");
    }

    #[test]
    fn broken_markup_still_converts() {
        let c = convert("<p>unclosed <i>italic <b>both</p> tail &amp; more");
        assert!(c.markdown.contains("unclosed"), "{}", c.markdown);
        assert!(c.markdown.contains("tail & more"), "{}", c.markdown);
    }

    fn piece() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            Just("<div>".to_string()),
            Just("</div>".to_string()),
            Just("<title>".to_string()),
            Just("</title>".to_string()),
            Just("<script>".to_string()),
            Just("</script>".to_string()),
            Just("<!--".to_string()),
            Just("-->".to_string()),
            Just("<p>".to_string()),
            Just("<br/>".to_string()),
            Just("<a href='x'>".to_string()),
            Just("&amp;".to_string()),
            Just("<".to_string()),
            Just(">".to_string()),
            Just("</".to_string()),
            Just("é".to_string()),
            "[a-zA-Z \n]{0,6}",
        ]
    }

    proptest::proptest! {
        #[test]
        fn any_markup_is_handled(parts in proptest::collection::vec(piece(), 0..80)) {
            let html: String = parts.concat();
            let _ = convert(&html);
            let stripped = strip_markup(&html);
            let _ = raw_title(&html);
            proptest::prop_assert!(estimated_depth(&html) <= html.matches('<').count());
            // Stripping never invents markup-free text longer than the input.
            proptest::prop_assert!(stripped.len() <= html.len() + html.matches('<').count());
        }

        #[test]
        fn plain_words_survive_stripping(words in proptest::collection::vec("[a-z]{1,8}", 1..20)) {
            let text = words.join(" ");
            proptest::prop_assert_eq!(strip_markup(&text), text.clone());
            let html = format!("<div><p>{text}</p></div>");
            proptest::prop_assert_eq!(strip_markup(&html), text.clone());
            proptest::prop_assert_eq!(convert(&html).markdown, text);
        }
    }
}
