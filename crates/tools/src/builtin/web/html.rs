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
//!
//! Every step is linear in the input, documents over [`MAX_HTML_BYTES`]
//! take the plain-text path too, and the parse is fed in pieces so that the
//! conversion stops soon after the call's deadline ([`convert_redacted`]).

use std::borrow::Cow;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

use html5ever::tendril::{StrTendril, TendrilSink as _};
use html5ever::{ParseOpts, parse_document};
use markup5ever_rcdom::{Node, NodeData, RcDom};
use toolcell_redact::Redactor;

/// Deeper documents are rendered as plain text instead of markdown.
pub(super) const MAX_DEPTH: usize = 400;

/// Larger documents (bytes of decoded HTML) are rendered as plain text by a
/// linear scan instead of being parsed and converted: it bounds the time
/// and memory one page can cost the host.
pub(super) const MAX_HTML_BYTES: usize = 2 * 1024 * 1024;

/// The parser is fed this many bytes at a time; between two pieces the
/// conversion checks whether it should stop.
const PARSE_PIECE_BYTES: usize = 16 * 1024;

/// Longest the tree path may parse before giving up on markdown and taking
/// the linear plain-text path instead. html5ever's DOM is quadratic on some
/// markup (text foster-parented out of a `<table>` is inserted before the
/// table by a linear search of its siblings), so a page can be slow to
/// parse without being deep or large.
pub(super) const PARSE_BUDGET: std::time::Duration = std::time::Duration::from_secs(5);

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

/// The conversion was stopped (the call's deadline passed or it was dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stopped;

thread_local! {
    static CONVERTER: htmd::HtmlToMarkdown = htmd::HtmlToMarkdown::builder()
        .skip_tags(SKIPPED.to_vec())
        .build();
}

/// [`convert_redacted`] with the built-in rules and no way to stop.
#[cfg(test)]
pub(super) fn convert(html: &str) -> Converted {
    let never = AtomicBool::new(false);
    convert_redacted(html, &Redactor::builtin(), &never, PARSE_BUDGET).unwrap_or_else(|Stopped| {
        Converted {
            title: String::new(),
            markdown: String::new(),
        }
    })
}

/// Converts an HTML document to markdown and extracts its title, redacting
/// secrets with `redactor` on the way.
///
/// Redaction happens twice: on every text node and attribute value of the
/// parsed tree, *before* the markdown conversion escapes `_`, `*`, `[`… (an
/// escaped `ghp\_…` or `sk\_live\_…` no longer looks like a token), and on
/// the finished markdown (a secret the markup split over several text
/// nodes). The plain-text fallbacks are redacted whole.
///
/// Polls `stop` between pieces of the parse and between stages, and gives
/// up with [`Stopped`] once it is set. The tree path takes documents of at
/// most [`MAX_HTML_BYTES`] whose parse finishes within `budget`; the others
/// (and deep ones) get the plain-text path, a linear scan.
pub(super) fn convert_redacted(
    html: &str,
    redactor: &Redactor,
    stop: &AtomicBool,
    budget: std::time::Duration,
) -> Result<Converted, Stopped> {
    let check = || {
        if stop.load(Ordering::Relaxed) {
            Err(Stopped)
        } else {
            Ok(())
        }
    };
    let plain = || -> Result<Converted, Stopped> {
        let title = raw_title(html);
        check()?;
        let text = strip_markup(html);
        check()?;
        Ok(Converted {
            title: redactor.redact(&title).into_owned(),
            markdown: redactor.redact(&text).into_owned(),
        })
    };
    if html.len() > MAX_HTML_BYTES || estimated_depth(html) > MAX_DEPTH {
        return plain();
    }
    let Some(tree) = parse(html, stop, std::time::Instant::now() + budget)? else {
        tracing::debug!(
            bytes = html.len(),
            "web_extract: the HTML parse ran over its budget; converting to plain text"
        );
        return plain();
    };
    check()?;
    redact_tree(&tree, redactor);
    let title = title(&tree);
    check()?;
    let markdown = if depth(&tree) > MAX_DEPTH {
        plain_text(&tree)
    } else {
        CONVERTER.with(|conv| conv.tree_to_markdown(&tree))
    };
    check()?;
    let markdown = unescape_markers(&markdown);
    let markdown = redactor.redact(&markdown).into_owned();
    Ok(Converted { title, markdown })
}

/// Parses `html` as htmd does, but feeds html5ever piece by piece so that
/// `stop` is seen within one piece's work; `None` once past `until`.
fn parse(
    html: &str,
    stop: &AtomicBool,
    until: std::time::Instant,
) -> Result<Option<Rc<Node>>, Stopped> {
    let opts = ParseOpts {
        tree_builder: html5ever::tree_builder::TreeBuilderOpts {
            scripting_enabled: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut parser = parse_document(RcDom::default(), opts);
    let mut rest = html;
    while !rest.is_empty() {
        if stop.load(Ordering::Relaxed) {
            return Err(Stopped);
        }
        if std::time::Instant::now() > until {
            return Ok(None);
        }
        let mut cut = rest.len().min(PARSE_PIECE_BYTES);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (piece, tail) = rest.split_at(cut);
        parser.process(StrTendril::from_slice(piece));
        rest = tail;
    }
    Ok(Some(parser.finish().document))
}

/// Redacts every text node and attribute value of the tree in place,
/// without recursion.
fn redact_tree(root: &Rc<Node>, redactor: &Redactor) {
    let mut stack: Vec<Rc<Node>> = vec![Rc::clone(root)];
    while let Some(node) = stack.pop() {
        match &node.data {
            NodeData::Text { contents } => {
                let mut contents = contents.borrow_mut();
                if let Cow::Owned(clean) = redactor.redact(&contents) {
                    *contents = StrTendril::from(clean);
                }
            }
            NodeData::Element { attrs, .. } => {
                for attr in attrs.borrow_mut().iter_mut() {
                    if let Cow::Owned(clean) = redactor.redact(&attr.value) {
                        attr.value = StrTendril::from(clean);
                    }
                }
            }
            _ => {}
        }
        for child in node.children.borrow().iter() {
            stack.push(Rc::clone(child));
        }
    }
}

/// The redaction markers put in text nodes, with the markdown escapes the
/// conversion added inside them removed (`«redacted:github\_token»` becomes
/// `«redacted:github_token»`).
fn unescape_markers(markdown: &str) -> Cow<'_, str> {
    const OPEN: &str = "«redacted:";
    if !markdown.contains(OPEN) {
        return Cow::Borrowed(markdown);
    }
    let mut out = String::with_capacity(markdown.len());
    let mut rest = markdown;
    while let Some(i) = rest.find(OPEN) {
        out.push_str(&rest[..i]);
        out.push_str(OPEN);
        let body = &rest[i + OPEN.len()..];
        // A kind is short: letters, digits, `_` (maybe escaped) and `-`.
        let end = body
            .char_indices()
            .take(64)
            .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '\\')))
            .map(|(j, _)| j);
        match end {
            Some(j) if body[j..].starts_with('»') => {
                out.push_str(&body[..j].replace("\\_", "_"));
                rest = &body[j..];
            }
            _ => rest = body,
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
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
///
/// Linear: the position of the next `>` is remembered and searched for
/// again only once the scan has passed it (markup such as `<a<a<a…` with no
/// `>` at all would otherwise be rescanned to the end for every `<`).
fn estimated_depth(html: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let bytes = html.as_bytes();
    let mut pos = 0;
    // The first `>` at or after the current tag (None: there is none left).
    let mut next_gt: Option<usize> = memchr::memchr(b'>', bytes);
    while let Some(i) = memchr::memchr(b'<', &bytes[pos..]).map(|i| pos + i) {
        pos = i + 1;
        let rest = &html[pos..];
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
        if next_gt.is_some_and(|g| g < pos) {
            next_gt = memchr::memchr(b'>', &bytes[pos..]).map(|g| pos + g);
        }
        let self_closing = next_gt.is_some_and(|end| bytes[..end].ends_with(b"/"));
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

    /// Tokens the built-in rules recognise, each with an `_` that markdown
    /// conversion would escape.
    const TOKENS: [&str; 3] = [
        "ghp_R8fK2mQ9xLp4Vt7Wn3Zc6Yb1Hd5Js0GaEu2T",
        "sk_live_4eC39HqLyjWDarjtT1zdp7dcXy",
        "hf_kD8sJ2mN4pQ7rT1vW3xZ5yB6cF9gH0jLaQ",
    ];

    #[test]
    fn secrets_are_redacted_before_markdown_escapes_them() {
        let red = Redactor::builtin();
        for tok in TOKENS {
            assert_ne!(red.redact(tok), tok, "{tok} is a token the rules know");
            let html = format!(
                "<title>key {tok}</title><p>Your key: {tok} (keep it)</p>\
                 <p><a href=\"https://x.example/?k={tok}\">link</a> <code>{tok}</code></p>\
                 <pre>{tok}</pre>"
            );
            let c = convert(&html);
            let bare = tok.replace('_', "\\_");
            for shown in [&c.markdown, &c.title] {
                assert!(!shown.contains(tok), "{tok} leaked: {shown}");
                assert!(!shown.contains(&bare), "{bare} leaked: {shown}");
                assert!(!shown.contains(&tok[tok.len() - 12..]), "{shown}");
                assert!(shown.contains("«redacted:"), "{shown}");
            }
            // Markers read as written by the redactor, without escapes.
            assert!(!c.markdown.contains("\\_"), "{}", c.markdown);
            assert!(
                c.markdown.contains("Your key: «redacted:"),
                "{}",
                c.markdown
            );
        }
    }

    #[test]
    fn host_secret_values_are_redacted_in_every_path() {
        let secret = "host-exact-value-1234567";
        let red = Redactor::new([secret]).unwrap();
        let never = AtomicBool::new(false);
        let tree = format!("<title>{secret}</title><p>a_b {secret} *x*</p>");
        let deep = format!("{}{secret}", "<div>".repeat(MAX_DEPTH + 10));
        for html in [tree, deep] {
            let c = convert_redacted(&html, &red, &never, PARSE_BUDGET).unwrap();
            assert!(!c.markdown.contains(secret), "{}", c.markdown);
            assert!(c.markdown.contains("«redacted:secret»"), "{}", c.markdown);
            assert!(!c.title.contains(secret), "{}", c.title);
        }
    }

    #[test]
    fn markers_lose_only_their_own_escapes() {
        assert_eq!(
            unescape_markers("a\\_b «redacted:github\\_token» c\\_d «redacted:x"),
            "a\\_b «redacted:github_token» c\\_d «redacted:x"
        );
        assert_eq!(unescape_markers("plain"), "plain");
    }

    #[test]
    fn a_set_stop_flag_stops_the_conversion() {
        let stop = AtomicBool::new(true);
        let html = "<p>x</p>".repeat(10_000);
        assert_eq!(
            convert_redacted(&html, &Redactor::builtin(), &stop, PARSE_BUDGET),
            Err(Stopped)
        );
    }

    #[test]
    fn a_parse_over_budget_falls_back_to_plain_text() {
        let never = AtomicBool::new(false);
        let html = format!(
            "<head><title>T</title></head><h1>Head</h1>{}",
            "<p>word</p>".repeat(5_000)
        );
        let c = convert_redacted(
            &html,
            &Redactor::builtin(),
            &never,
            std::time::Duration::ZERO,
        )
        .unwrap();
        assert_eq!(c.title, "T");
        assert!(
            c.markdown.starts_with("Head\nword\nword"),
            "{:.40}",
            c.markdown
        );
        assert!(!c.markdown.contains('#'));
    }

    #[test]
    fn oversized_html_takes_the_linear_plain_text_path() {
        let html = format!("<h1>Top</h1>{}", "<p>x</p>".repeat(MAX_HTML_BYTES / 8 + 1));
        let c = convert(&html);
        assert!(c.markdown.starts_with("Top\nx\n"), "{:.40}", c.markdown);
    }

    #[test]
    fn the_depth_estimate_is_linear_on_tags_without_an_end() {
        // Before: every `<a` searched the rest of the text for a `>`, 2e10
        // byte comparisons here; now one pass.
        let html = "<a".repeat(200_000);
        let t = std::time::Instant::now();
        assert_eq!(estimated_depth(&html), 200_000);
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            t.elapsed()
        );
        // `>` still decides self-closing tags.
        assert_eq!(estimated_depth("<a/><b><c/>"), 1);
        // As before, one `>` ends every tag opened before it.
        assert_eq!(estimated_depth("<a<b/>"), 0);
        assert_eq!(estimated_depth("<a<b>"), 2);
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
