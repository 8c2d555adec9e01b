//! Inputs for the `web_extract` bench: article-like HTML pages (head with
//! styles and scripts, headings, paragraphs with links and emphasis, lists,
//! tables, code blocks) of a requested size.

use crate::Rng;

const WORDS: &[&str] = &[
    "kernel",
    "cell",
    "tool",
    "the",
    "of",
    "and",
    "request",
    "socket",
    "token",
    "deadline",
    "output",
    "variable",
    "persistent",
    "markdown",
    "converter",
    "page",
    "search",
    "result",
    "agent",
    "budget",
    "python",
    "stub",
    "schema",
    "with",
    "for",
    "a",
    "is",
    "runs",
    "keeps",
];

fn sentence(rng: &mut Rng, words: usize) -> String {
    let mut s = String::new();
    for i in 0..words {
        if i > 0 {
            s.push(' ');
        }
        let w = rng.pick(WORDS);
        match rng.next() % 12 {
            0 => s.push_str(&format!("<a href=\"https://example.org/{w}/{i}\">{w}</a>")),
            1 => s.push_str(&format!("<strong>{w}</strong>")),
            2 => s.push_str(&format!("<em>{w}</em>")),
            3 => s.push_str(&format!("<code>{w}()</code>")),
            _ => s.push_str(w),
        }
    }
    s.push('.');
    s
}

/// An HTML page of about `len` bytes (at least the boilerplate), the same
/// for the same `len`.
pub fn html_page(len: usize) -> String {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ len as u64);
    let mut out = String::from(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>Benchmark article</title>\
         <style>body{font-family:sans-serif}.nav a{margin:0 4px}</style>\
         <script>window.dataLayer=window.dataLayer||[];function gtag(){dataLayer.push(arguments)}</script>\
         </head><body><nav class=\"nav\"><a href=\"/\">Home</a><a href=\"/docs\">Docs</a></nav>\
         <main><article>",
    );
    let mut section = 0;
    while out.len() < len {
        section += 1;
        out.push_str(&format!("<h2 id=\"s{section}\">Section {section}</h2>"));
        for _ in 0..3 {
            let n = 12 + (rng.next() % 20) as usize;
            out.push_str(&format!("<p>{}</p>\n", sentence(&mut rng, n)));
        }
        match section % 3 {
            0 => {
                out.push_str("<ul>");
                for _ in 0..4 {
                    out.push_str(&format!("<li>{}</li>", sentence(&mut rng, 6)));
                }
                out.push_str("</ul>\n");
            }
            1 => {
                out.push_str("<table><thead><tr><th>name</th><th>value</th></tr></thead><tbody>");
                for i in 0..4 {
                    out.push_str(&format!(
                        "<tr><td>{}</td><td>{i}</td></tr>",
                        rng.pick(WORDS)
                    ));
                }
                out.push_str("</tbody></table>\n");
            }
            _ => {
                out.push_str(
                    "<pre><code class=\"language-python\">for cell in cells:\n    \
                     result = kernel.run(cell)\n    print(result[\"status\"])\n</code></pre>\n",
                );
            }
        }
    }
    out.push_str("</article></main><footer>&copy; toolcell</footer></body></html>");
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn pages_have_the_requested_size() {
        let p = super::html_page(100_000);
        assert!(p.len() >= 100_000 && p.len() < 102_000, "{}", p.len());
        assert_eq!(p, super::html_page(100_000));
    }
}
