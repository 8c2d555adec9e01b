//! Built-in redaction rules: the literal prefilter table, the per-kind regexes
//! and the code-safety checks. Everything here is compiled once per process.

use once_cell::sync::Lazy;
use regex::Regex;

/// One rule of the built-in set. Its index in [`RULES`] is its bit in a class mask.
pub(crate) struct Rule {
    /// Mask kind written as `«redacted:<kind>»`.
    pub kind: &'static str,
    /// What the rule does once its literal was seen on a line.
    pub how: How,
}

pub(crate) enum How {
    /// A vendor token: the regex matches the whole token (optionally with a
    /// capture group 1 holding the part to mask); boundaries and the
    /// placeholder check are applied in code.
    Vendor(&'static str),
    Jwt,
    Pem,
    Url,
    Authorization,
    ApiKeyHeader,
    Assignment,
}

/// The built-in rules, in priority order (earlier wins when masks overlap).
pub(crate) static RULES: &[Rule] = &[
    Rule {
        kind: "private_key",
        how: How::Pem,
    },
    Rule {
        kind: "anthropic_key",
        how: How::Vendor(r"sk-ant-[A-Za-z0-9_-]{20,}"),
    },
    Rule {
        kind: "openai_key",
        how: How::Vendor(r"sk-(?:proj-|svcacct-|admin-|or-v1-)?[A-Za-z0-9_-]{20,}"),
    },
    Rule {
        kind: "github_token",
        how: How::Vendor(r"gh[pousr]_[A-Za-z0-9]{36,}"),
    },
    Rule {
        kind: "github_token",
        how: How::Vendor(r"github_pat_[A-Za-z0-9_]{22,}"),
    },
    Rule {
        kind: "gitlab_token",
        how: How::Vendor(
            r"gl(?:pat|dt|ptt|rt|oas|soat|cbt|imt|ft|agent|ffct)-[A-Za-z0-9_-]{20,64}",
        ),
    },
    Rule {
        kind: "slack_token",
        how: How::Vendor(r"(?:xox[abposr]|xapp)-[A-Za-z0-9-]{10,}"),
    },
    Rule {
        kind: "aws_access_key",
        how: How::Vendor(r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}"),
    },
    Rule {
        kind: "google_api_key",
        how: How::Vendor(r"AIza[0-9A-Za-z_-]{30,45}"),
    },
    Rule {
        kind: "google_oauth_token",
        how: How::Vendor(r"ya29\.[0-9A-Za-z_-]{20,}"),
    },
    Rule {
        kind: "stripe_key",
        how: How::Vendor(r"(?:(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}|whsec_[A-Za-z0-9]{24,64})"),
    },
    Rule {
        kind: "sendgrid_key",
        how: How::Vendor(r"SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}"),
    },
    Rule {
        kind: "huggingface_token",
        how: How::Vendor(r"hf_[A-Za-z0-9]{30,40}"),
    },
    Rule {
        kind: "npm_token",
        how: How::Vendor(r"npm_[A-Za-z0-9]{30,45}"),
    },
    Rule {
        kind: "pypi_token",
        how: How::Vendor(r"pypi-AgE[A-Za-z0-9_-]{50,}"),
    },
    Rule {
        kind: "digitalocean_token",
        how: How::Vendor(r"do[opr]_v1_[a-f0-9]{64}"),
    },
    Rule {
        kind: "replicate_token",
        how: How::Vendor(r"r8_[A-Za-z0-9]{30,45}"),
    },
    Rule {
        kind: "groq_key",
        how: How::Vendor(r"gsk_[A-Za-z0-9]{40,60}"),
    },
    Rule {
        kind: "xai_key",
        how: How::Vendor(r"xai-[A-Za-z0-9]{70,}"),
    },
    Rule {
        kind: "perplexity_key",
        how: How::Vendor(r"pplx-[A-Za-z0-9]{40,60}"),
    },
    Rule {
        kind: "shopify_token",
        how: How::Vendor(r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}"),
    },
    Rule {
        kind: "linear_key",
        how: How::Vendor(r"lin_api_[A-Za-z0-9]{32,48}"),
    },
    Rule {
        kind: "doppler_token",
        how: How::Vendor(r"dp\.(?:pt|st|ct|sa)\.[A-Za-z0-9]{40,44}"),
    },
    Rule {
        kind: "atlassian_token",
        how: How::Vendor(r"ATATT3[A-Za-z0-9_=-]{150,}"),
    },
    Rule {
        kind: "grafana_token",
        how: How::Vendor(r"(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2})"),
    },
    Rule {
        kind: "sentry_token",
        how: How::Vendor(r"sntry[su]_[A-Za-z0-9+/=_-]{60,}"),
    },
    Rule {
        kind: "vault_token",
        how: How::Vendor(r"hv[sb]\.[A-Za-z0-9_-]{24,}"),
    },
    Rule {
        kind: "docker_token",
        how: How::Vendor(r"dckr_pat_[A-Za-z0-9_-]{27,64}"),
    },
    Rule {
        kind: "netlify_token",
        how: How::Vendor(r"nfp_[A-Za-z0-9]{30,45}"),
    },
    Rule {
        kind: "notion_token",
        how: How::Vendor(r"ntn_[A-Za-z0-9]{40,50}"),
    },
    Rule {
        kind: "figma_token",
        how: How::Vendor(r"figd_[A-Za-z0-9_-]{40,44}"),
    },
    Rule {
        kind: "azure_storage_key",
        how: How::Vendor(r"AccountKey=([A-Za-z0-9+/]{86}==)"),
    },
    Rule {
        kind: "age_secret_key",
        how: How::Vendor(r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
    },
    Rule {
        kind: "databricks_token",
        how: How::Vendor(r"dapi[a-f0-9]{32}(?:-[0-9])?"),
    },
    Rule {
        kind: "tailscale_key",
        how: How::Vendor(r"tskey-(?:auth|api|client|scim|webhook)-[A-Za-z0-9-]{20,}"),
    },
    Rule {
        kind: "square_token",
        how: How::Vendor(r"sq0(?:atp|csp)-[0-9A-Za-z_-]{22,43}"),
    },
    Rule {
        kind: "postman_key",
        how: How::Vendor(r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}"),
    },
    Rule {
        kind: "supabase_token",
        how: How::Vendor(r"sbp_[a-f0-9]{40}"),
    },
    Rule {
        kind: "langsmith_key",
        how: How::Vendor(r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}"),
    },
    Rule {
        kind: "pinecone_key",
        how: How::Vendor(r"pcsk_[A-Za-z0-9_]{30,}"),
    },
    Rule {
        kind: "jwt",
        how: How::Jwt,
    },
    Rule {
        kind: "url_password",
        how: How::Url,
    },
    Rule {
        kind: "authorization",
        how: How::Authorization,
    },
    Rule {
        kind: "api_key_header",
        how: How::ApiKeyHeader,
    },
    Rule {
        kind: "env_secret",
        how: How::Assignment,
    },
];

/// Longest token a vendor rule accepts (the patterns use open-ended
/// repetitions, which compile to much smaller automata; the bound is applied
/// to the match instead).
pub(crate) fn vendor_max_len(kind: &str) -> usize {
    match kind {
        "google_oauth_token" => 2100,
        "atlassian_token" => 320,
        "grafana_token" => 450,
        _ => 280,
    }
}

/// Kind used for exact values registered with [`crate::Redactor::new`].
pub(crate) const EXACT_KIND: &str = "secret";
/// Kind for a long opaque token used as the user part of a URL.
pub(crate) const URL_TOKEN_KIND: &str = "url_token";

pub(crate) fn rule_index(kind_how: fn(&How) -> bool) -> usize {
    RULES.iter().position(|r| kind_how(&r.how)).unwrap_or(0)
}

pub(crate) static IDX_PEM: Lazy<usize> = Lazy::new(|| rule_index(|h| matches!(h, How::Pem)));
pub(crate) static IDX_JWT: Lazy<usize> = Lazy::new(|| rule_index(|h| matches!(h, How::Jwt)));
pub(crate) static IDX_URL: Lazy<usize> = Lazy::new(|| rule_index(|h| matches!(h, How::Url)));
pub(crate) static IDX_AUTH: Lazy<usize> =
    Lazy::new(|| rule_index(|h| matches!(h, How::Authorization)));
pub(crate) static IDX_APIHDR: Lazy<usize> =
    Lazy::new(|| rule_index(|h| matches!(h, How::ApiKeyHeader)));
pub(crate) static IDX_ENV: Lazy<usize> = Lazy::new(|| rule_index(|h| matches!(h, How::Assignment)));

/// What a literal hit must be checked for before its line is worth a regex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verify {
    /// The literal starts a token: the byte before it is not a token byte.
    TokenStart,
    /// Always a candidate.
    Always,
    /// `://` followed by a `@` before any whitespace.
    UrlAt,
}

/// The literal prefilter table: (literal, rule kinds it enables, check).
/// Matched case-sensitively (vendors print their prefixes in one case), which
/// lets it run on a SIMD (Teddy) searcher; keep it at 64 patterns or fewer
/// (Teddy's limit). Rules are named by kind; a literal enables every rule of
/// that kind. Name/header rules are not here: they are anchored on the `=` /
/// `:` separator instead (see [`separator_candidate`]).
pub(crate) static LITERALS: &[(&str, &[&str], Verify)] = &[
    ("-----BEGIN", &["private_key"], Verify::Always),
    ("sk-", &["openai_key", "anthropic_key"], Verify::TokenStart),
    ("ghp_", &["github_token"], Verify::TokenStart),
    ("gho_", &["github_token"], Verify::TokenStart),
    ("ghu_", &["github_token"], Verify::TokenStart),
    ("ghs_", &["github_token"], Verify::TokenStart),
    ("ghr_", &["github_token"], Verify::TokenStart),
    ("github_pat_", &["github_token"], Verify::TokenStart),
    ("glpat-", &["gitlab_token"], Verify::TokenStart),
    ("gldt-", &["gitlab_token"], Verify::TokenStart),
    ("glptt-", &["gitlab_token"], Verify::TokenStart),
    ("glrt-", &["gitlab_token"], Verify::TokenStart),
    ("gloas-", &["gitlab_token"], Verify::TokenStart),
    ("glsoat-", &["gitlab_token"], Verify::TokenStart),
    ("glcbt-", &["gitlab_token"], Verify::TokenStart),
    ("glimt-", &["gitlab_token"], Verify::TokenStart),
    ("glft-", &["gitlab_token"], Verify::TokenStart),
    ("glagent-", &["gitlab_token"], Verify::TokenStart),
    ("glffct-", &["gitlab_token"], Verify::TokenStart),
    ("xox", &["slack_token"], Verify::TokenStart),
    ("xapp-", &["slack_token"], Verify::TokenStart),
    ("AKIA", &["aws_access_key"], Verify::TokenStart),
    ("ASIA", &["aws_access_key"], Verify::TokenStart),
    ("ABIA", &["aws_access_key"], Verify::TokenStart),
    ("ACCA", &["aws_access_key"], Verify::TokenStart),
    ("AIza", &["google_api_key"], Verify::TokenStart),
    ("ya29.", &["google_oauth_token"], Verify::TokenStart),
    ("k_live_", &["stripe_key"], Verify::Always),
    ("k_test_", &["stripe_key"], Verify::Always),
    ("whsec_", &["stripe_key"], Verify::TokenStart),
    ("SG.", &["sendgrid_key"], Verify::TokenStart),
    ("hf_", &["huggingface_token"], Verify::TokenStart),
    ("npm_", &["npm_token"], Verify::TokenStart),
    ("pypi-AgE", &["pypi_token"], Verify::TokenStart),
    ("_v1_", &["digitalocean_token"], Verify::Always),
    ("r8_", &["replicate_token"], Verify::TokenStart),
    ("gsk_", &["groq_key"], Verify::TokenStart),
    ("xai-", &["xai_key"], Verify::TokenStart),
    ("pplx-", &["perplexity_key"], Verify::TokenStart),
    ("shp", &["shopify_token"], Verify::TokenStart),
    ("lin_api_", &["linear_key"], Verify::TokenStart),
    ("dp.", &["doppler_token"], Verify::TokenStart),
    ("ATATT3", &["atlassian_token"], Verify::TokenStart),
    ("glsa_", &["grafana_token"], Verify::TokenStart),
    ("glc_", &["grafana_token"], Verify::TokenStart),
    ("sntry", &["sentry_token"], Verify::TokenStart),
    ("hvs.", &["vault_token"], Verify::TokenStart),
    ("hvb.", &["vault_token"], Verify::TokenStart),
    ("dckr_pat_", &["docker_token"], Verify::TokenStart),
    ("nfp_", &["netlify_token"], Verify::TokenStart),
    ("ntn_", &["notion_token"], Verify::TokenStart),
    ("figd_", &["figma_token"], Verify::TokenStart),
    ("AccountKey=", &["azure_storage_key"], Verify::TokenStart),
    ("AGE-SECRET-KEY-1", &["age_secret_key"], Verify::TokenStart),
    ("dapi", &["databricks_token"], Verify::TokenStart),
    ("tskey-", &["tailscale_key"], Verify::TokenStart),
    ("sq0", &["square_token"], Verify::TokenStart),
    ("PMAK-", &["postman_key"], Verify::TokenStart),
    ("sbp_", &["supabase_token"], Verify::TokenStart),
    ("lsv2_", &["langsmith_key"], Verify::TokenStart),
    ("pcsk_", &["pinecone_key"], Verify::TokenStart),
    ("eyJ", &["jwt"], Verify::TokenStart),
    ("://", &["url_password"], Verify::UrlAt),
];

/// Header names (lowercase) whose value the header rules judge.
pub(crate) static HEADER_NAMES: &[&str] = &[
    "authorization",
    "api-key",
    "apikey",
    "auth-token",
    "access-token",
    "api-token",
    "private-token",
    "vault-token",
    "subscription-key",
    "subscription-token",
    "figma-token",
    "functions-key",
    "rapidapi-key",
];

/// Is the separator (`=` or `:`) at `p` worth running the name/header rules
/// for? Looks back for the name (`name`, `"name"`, `name"]`, blanks) and
/// forward for the value. A candidate when the name is a header name, or
/// when it is a secret name and a value of at least 16 bytes follows. A
/// necessary condition for the `env_secret`, `authorization` and
/// `api_key_header` rules, kept cheap: it runs at every `=` and `:`.
/// [`separator_rules`] bit: the `env_secret` assignment rule.
pub(crate) const SEP_ENV: u8 = 1;
/// [`separator_rules`] bit: the `authorization` header rule.
pub(crate) const SEP_AUTH: u8 = 2;
/// [`separator_rules`] bit: the `api_key_header` rule.
pub(crate) const SEP_APIHDR: u8 = 4;

pub(crate) fn separator_candidate(b: &[u8], p: usize) -> bool {
    separator_rules(b, p) != 0
}

/// Bytes that cannot be in the first 16 bytes of a credential value after
/// a separator: ASCII whitespace, quotes and closing/list punctuation.
static VALUE_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let stops = b" \t\n\x0c\r\"'`,;&)]}";
    let mut k = 0;
    while k < stops.len() {
        t[stops[k] as usize] = true;
        k += 1;
    }
    t
};

/// A space or a tab.
#[inline]
fn blank(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

/// Where the name before the separator at `p` ends: back over blanks,
/// `]` and a closing quote (`key = v`, `a["key"]: v`, `KEY=v`).
#[inline]
pub(crate) fn name_end(b: &[u8], p: usize) -> usize {
    // The first blank without a branch (code has `x = y` and `x=y` alike).
    let mut j = p - usize::from(p > 0 && blank(b[p - 1]));
    while j > 0 && blank(b[j - 1]) {
        j -= 1;
    }
    if j > 0 && b[j - 1] == b']' {
        j -= 1;
    }
    if j > 0 && matches!(b[j - 1], b'"' | b'\'' | b'`') {
        j -= 1;
    }
    j
}

/// Which separator-anchored rules the separator at `p` enables:
/// [`SEP_ENV`], [`SEP_AUTH`], [`SEP_APIHDR`] bits (0 = none).
pub(crate) fn separator_rules(b: &[u8], p: usize) -> u8 {
    let end = name_end(b, p);
    if end == 0 {
        return 0;
    }
    let last = b[end - 1] | 0x20;
    // Every header name ends in `…on`, `…ey` or `…en` (any case): only
    // those endings are looked up.
    if end >= 2
        && matches!(
            (b[end - 2] | 0x20, last),
            (b'o', b'n') | (b'e', b'y') | (b'e', b'n')
        )
        && maybe_header_end(b, end)
        && let Some(h) = HEADER_NAMES
            .iter()
            .find(|h| end >= h.len() && b[end - h.len()..end].eq_ignore_ascii_case(h.as_bytes()))
    {
        // A header name is also a secret name: the assignment rule may apply too.
        return if *h == "authorization" {
            SEP_AUTH | SEP_ENV
        } else {
            SEP_APIHDR | SEP_ENV
        };
    }
    if !(b[end - 1].is_ascii_alphanumeric() || b[end - 1] == b'_') {
        return 0;
    }
    // Value, forwards: at least 16 bytes that could be a credential.
    if matches!(b.get(p + 1), Some(b'=')) {
        return 0;
    }
    let mut i = p + 1;
    i += usize::from(i < b.len() && blank(b[i]));
    while i < b.len() && blank(b[i]) {
        i += 1;
    }
    let mut k = i;
    while k < b.len()
        && k < i + 2
        && matches!(b[k], b'r' | b'R' | b'b' | b'B' | b'u' | b'U' | b'f' | b'F')
    {
        k += 1;
    }
    if matches!(b.get(k), Some(b'"' | b'\'' | b'`')) {
        i = k + 1;
    }
    if b.len() < i + 16 {
        return 0;
    }
    // Branch-free over the 16 bytes (a byte table, not a match per byte).
    if b[i..i + 16]
        .iter()
        .fold(false, |any, &c| any | VALUE_STOP[usize::from(c)])
    {
        return 0;
    }
    // Only now the name itself.
    let lo = end.saturating_sub(128);
    let mut j = end;
    while j > lo && (b[j - 1].is_ascii_alphanumeric() || matches!(b[j - 1], b'_' | b'.' | b'-')) {
        j -= 1;
    }
    if secret_name_bytes(&b[j..end]) {
        SEP_ENV
    } else {
        0
    }
}

/// A necessary condition for a [`HEADER_NAMES`] entry to end at `end`
/// (which ends in `on`, `ey` or `en`), cheaper than the lookup: `…-key` or
/// `…ikey`, `…-token`, or 13 bytes for `authorization`.
#[inline]
fn maybe_header_end(b: &[u8], end: usize) -> bool {
    match b[end - 1] | 0x20 {
        b'y' => end >= 6 && b[end - 3] | 0x20 == b'k' && matches!(b[end - 4] | 0x20, b'-' | b'i'),
        b'n' if b[end - 2] | 0x20 == b'e' => {
            end >= 9 && b[end - 5..end].eq_ignore_ascii_case(b"token") && b[end - 6] == b'-'
        }
        _ => end >= 13,
    }
}

/// Rule bit mask of the rules of the given kinds.
pub(crate) fn mask_of(kinds: &[&str]) -> u64 {
    let mut m = 0u64;
    for (i, r) in RULES.iter().enumerate() {
        if kinds.contains(&r.kind) {
            m |= 1u64 << i;
        }
    }
    m
}

/// The rules' regexes, one per rule (`None` for rules checked by hand),
/// each compiled the first time a line needs it: a host whose output never
/// holds a rule's literal never pays for that rule's regex (20–90 µs each;
/// compiling all of them was ~4 ms of CPU at every start).
pub(crate) struct Compiled {
    pub vendor: Vec<Option<LazyRegex>>,
    pub pem_begin: LazyRegex,
    pub pem_end: LazyRegex,
    pub jwt: LazyRegex,
    pub url: LazyRegex,
    pub authorization: LazyRegex,
    pub api_header: LazyRegex,
    pub assignment: LazyRegex,
}

/// A built-in pattern, compiled on first use (then shared by every thread).
pub(crate) struct LazyRegex {
    pattern: &'static str,
    cell: once_cell::sync::OnceCell<Regex>,
}

impl LazyRegex {
    const fn new(pattern: &'static str) -> Self {
        Self {
            pattern,
            cell: once_cell::sync::OnceCell::new(),
        }
    }
}

impl std::ops::Deref for LazyRegex {
    type Target = Regex;

    fn deref(&self) -> &Regex {
        self.cell.get_or_init(|| re(self.pattern))
    }
}

fn re(p: &str) -> Regex {
    // The patterns are constants covered by tests; a failure here is a bug.
    #[allow(clippy::expect_used)]
    Regex::new(p).expect("built-in redaction pattern compiles")
}

pub(crate) static COMPILED: Lazy<Compiled> = Lazy::new(|| Compiled {
    vendor: RULES
        .iter()
        .map(|r| match r.how {
            How::Vendor(p) => Some(LazyRegex::new(p)),
            _ => None,
        })
        .collect(),
    pem_begin: LazyRegex::new(r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"),
    pem_end: LazyRegex::new(r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"),
    jwt: LazyRegex::new(r"eyJ[A-Za-z0-9_-]{8,}\.ey[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{0,}"),
    url: LazyRegex::new(
        r"(?i)[a-z][a-z0-9+.-]{1,30}://([^\s:/?#@'\x22<>\[\]]{0,})(?::([^\s/?'\x22<>]{1,}))?@",
    ),
    authorization: LazyRegex::new(r"(?i)(?:proxy-)?authorization([\x22'`]?)[ \t]*[:=][ \t]*"),
    api_header: LazyRegex::new(
        r"(?i)(?:x-)?(?:api-key|auth-token|access-token|apikey|api-token|private-token|vault-token|subscription-key|subscription-token|figma-token|functions-key|rapidapi-key|goog-api-key|pinecone-api-key|ocp-apim-subscription-key)([\x22'`]?)[ \t]*:[ \t]*",
    ),
    assignment: LazyRegex::new(
        r"^([A-Za-z_][A-Za-z0-9_.-]{0,})([\x22'`]?\]?)([ \t]*)(:=|==|=>|!=|<=|>=|=|:)([ \t]*)((?:[rRbBuUfF]{0,2}[\x22'`])?)([^\s\x22'`,;&)\]}]{1,})",
    ),
});

/// A byte that continues a token (identifier or key body).
#[inline]
pub(crate) fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Character classes present in `s`: lower, upper, digit, other printable.
pub(crate) struct Classes {
    pub lower: bool,
    pub upper: bool,
    pub digit: bool,
    pub symbol: bool,
}

pub(crate) fn classes(s: &str) -> Classes {
    let mut c = Classes {
        lower: false,
        upper: false,
        digit: false,
        symbol: false,
    };
    for b in s.bytes() {
        match b {
            b'a'..=b'z' => c.lower = true,
            b'A'..=b'Z' => c.upper = true,
            b'0'..=b'9' => c.digit = true,
            _ => c.symbol = true,
        }
    }
    c
}

impl Classes {
    pub(crate) fn count(&self) -> usize {
        usize::from(self.lower)
            + usize::from(self.upper)
            + usize::from(self.digit)
            + usize::from(self.symbol)
    }
    pub(crate) fn letter(&self) -> bool {
        self.lower || self.upper
    }
}

/// A vendor key body looks random: it has a digit or both letter cases (or
/// is at least 32 long) and no run of 8 identical characters, so
/// `sk-xxxxxxxx…` placeholders and short word-like bodies fail this.
pub(crate) fn random_looking(body: &str) -> bool {
    let c = classes(body);
    let mixed = c.digit || (c.lower && c.upper) || body.len() >= 32;
    mixed && !long_repeat(body)
}

/// Eight or more copies of the same byte in a row (placeholder filler).
fn long_repeat(s: &str) -> bool {
    let mut run = 0;
    let mut prev = 0u8;
    for b in s.bytes() {
        if b == prev {
            run += 1;
            if run >= 8 {
                return true;
            }
        } else {
            prev = b;
            run = 1;
        }
    }
    false
}

/// A value that is a variable reference, template, or placeholder rather than
/// a literal secret: `$X`, `${X}`, `{{ x }}`, `{x}`, `%s`, `%(x)s`, `<x>`,
/// `***`, `xxxx`, `...`.
pub(crate) fn is_template(v: &str) -> bool {
    let b = v.as_bytes();
    if b.is_empty() {
        return true;
    }
    if b[0] == b'$' || b[0] == b'<' || b[0] == b'%' || b[0] == b'@' {
        return true;
    }
    if v.contains(['{', '}', '`'])
        || v.contains("%s")
        || v.contains("%(")
        || v.contains("$(")
        || v.contains("${")
    {
        return true;
    }
    if b.iter()
        .all(|&c| c == b'*' || c == b'x' || c == b'X' || c == b'.' || c == b'#')
    {
        return true;
    }
    let lower = v.to_ascii_lowercase();
    lower.starts_with("your-")
        || lower.starts_with("your_")
        || lower.contains("redacted")
        || lower.contains("placeholder")
}

/// A placeholder word standing for a credential in docs and prose
/// (`token`, `password`, …): not masked in header values, where a real
/// credential is never an English word.
pub(crate) fn is_placeholder_word(v: &str) -> bool {
    matches!(
        v.to_ascii_lowercase().as_str(),
        "password"
            | "passwd"
            | "pass"
            | "pwd"
            | "secret"
            | "token"
            | "tokens"
            | "key"
            | "apikey"
            | "api_key"
            | "credentials"
            | "none"
            | "null"
            | "undefined"
    )
}

/// Credential-shaped: at least 16 chars, printable ASCII without spaces, mixed
/// character classes, not an expression, path or URL. See SECURITY.md
/// ("Secrets are redacted from everything toolcell returns, stores or writes").
pub(crate) fn credential_shaped(v: &str) -> bool {
    if v.len() < 16 || v.len() > 1024 {
        return false;
    }
    if !v.bytes().all(|b| b.is_ascii_graphic()) {
        return false;
    }
    if is_template(v) {
        return false;
    }
    if v.contains(['(', ')', '[', ']', '<', '>', '"', '\'', '\\']) || v.contains("://") {
        return false;
    }
    if looks_like_path(v) {
        return false;
    }
    if dotted_identifier(v) {
        return false;
    }
    let c = classes(v);
    (c.letter() && c.digit) || c.count() >= 3
}

/// A file path (`/x/y`, `./x`, `~/x`) rather than base64 that happens to
/// start with `/`: no `+`/`=`, mostly not upper case.
fn looks_like_path(v: &str) -> bool {
    let prefixed =
        v.starts_with('/') || v.starts_with("./") || v.starts_with("../") || v.starts_with("~/");
    let upper = v.bytes().filter(u8::is_ascii_uppercase).count();
    prefixed && !v.contains(['+', '=']) && upper * 4 < v.len()
}

/// A Python/shell identifier: `[A-Za-z_][A-Za-z0-9_]*`.
pub(crate) fn is_identifier(v: &str) -> bool {
    let mut b = v.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// An identifier-shaped string that reads as random (no `_`, frequent
/// switches between lower case, upper case and digits), e.g. a 32-char key.
pub(crate) fn random_identifier(v: &str) -> bool {
    if v.contains('_') {
        return false;
    }
    let class = |c: u8| match c {
        b'a'..=b'z' => 0,
        b'A'..=b'Z' => 1,
        _ => 2,
    };
    let b = v.as_bytes();
    let switches = b.windows(2).filter(|w| class(w[0]) != class(w[1])).count();
    switches * 3 >= b.len()
}

/// `a.b_c.d`: an attribute path, i.e. code, not a literal.
fn dotted_identifier(v: &str) -> bool {
    let mut parts = 0;
    for part in v.split('.') {
        let mut bytes = part.bytes();
        match bytes.next() {
            Some(b) if b.is_ascii_alphabetic() || b == b'_' => {}
            _ => return false,
        }
        if !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return false;
        }
        parts += 1;
    }
    parts >= 2
}

/// Does an assignment/field name name a secret? Split into segments at
/// non-alphanumerics and camelCase humps; one segment must be a secret word
/// (`key` only as a whole segment, so `monkey` and `keyboard` are not secret)
/// or end in one of the unambiguous ones (`githubtoken`, `dbpassword`).
pub(crate) fn secret_name(name: &str) -> bool {
    secret_name_bytes(name.as_bytes())
}

/// Is `seg` (one segment of a name) a secret word, or does it end in one
/// of the unambiguous ones or start with `password`? Case-insensitive.
/// The words are looked up by length and the suffixes by last letter (this
/// runs for every name before a credential-shaped value).
fn secret_segment(seg: &[u8]) -> bool {
    let is = |w: &[u8]| seg.eq_ignore_ascii_case(w);
    let word = match seg.len() {
        3 => is(b"key") || is(b"pwd") || is(b"dsn") || is(b"sas"),
        4 => is(b"keys") || is(b"pass") || is(b"cred") || is(b"auth"),
        5 => is(b"token") || is(b"creds"),
        6 => is(b"apikey") || is(b"tokens") || is(b"secret") || is(b"passwd") || is(b"bearer"),
        7 => is(b"secrets") || is(b"webhook"),
        8 => is(b"password"),
        9 => is(b"passwords") || is(b"accesskey") || is(b"secretkey") || is(b"authtoken"),
        10 => is(b"passphrase") || is(b"credential") || is(b"privatekey"),
        11 => is(b"credentials") || is(b"accesstoken"),
        _ => false,
    };
    if word {
        return true;
    }
    let ends =
        |s: &[u8]| seg.len() >= s.len() && seg[seg.len() - s.len()..].eq_ignore_ascii_case(s);
    let suffix = match seg.last().map(|c| c | 0x20) {
        Some(b'd') => ends(b"password") || ends(b"passwd"),
        Some(b't') => ends(b"secret"),
        Some(b'n') => ends(b"token"),
        Some(b'y') => ends(b"apikey") || ends(b"secretkey") || ends(b"accesskey"),
        _ => false,
    };
    suffix || (seg.len() >= 8 && seg[..8].eq_ignore_ascii_case(b"password"))
}

pub(crate) fn secret_name_bytes(name: &[u8]) -> bool {
    any_segment(name, secret_segment)
}

/// Whether `is_secret` holds for a segment of `name`: it is split at every
/// byte that is not alphanumeric and where a lowercase letter or digit is
/// followed by an uppercase one (`apiKey` → `api`, `Key`).
fn any_segment(name: &[u8], is_secret: impl Fn(&[u8]) -> bool) -> bool {
    let mut start = 0;
    let mut prev_lower = false;
    for (i, &c) in name.iter().enumerate() {
        if !c.is_ascii_alphanumeric() {
            if is_secret(&name[start..i]) {
                return true;
            }
            start = i + 1;
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower {
            if is_secret(&name[start..i]) {
                return true;
            }
            start = i;
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
    }
    is_secret(&name[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_patterns_compile_and_literals_name_real_kinds() {
        // Each is compiled on first use: compile every one here.
        let c = &*COMPILED;
        for re in c.vendor.iter().flatten() {
            let _ = re.as_str();
        }
        for re in [
            &c.pem_begin,
            &c.pem_end,
            &c.jwt,
            &c.url,
            &c.authorization,
            &c.api_header,
            &c.assignment,
        ] {
            let _ = re.as_str();
        }
        assert_eq!(
            c.vendor.iter().flatten().count(),
            RULES
                .iter()
                .filter(|r| matches!(r.how, How::Vendor(_)))
                .count()
        );
        for (lit, kinds, _) in LITERALS {
            assert_ne!(mask_of(kinds), 0, "literal {lit} enables no rule");
        }
        assert!(RULES.len() <= 63, "rule masks are u64 with bit 63 reserved");
        assert!(LITERALS.len() <= 64, "Teddy takes at most 64 patterns");
    }

    #[test]
    fn value_stop_table_is_the_value_rule() {
        for c in 0..=255u8 {
            let rule = c.is_ascii_whitespace()
                || matches!(
                    c,
                    b'"' | b'\'' | b'`' | b',' | b';' | b'&' | b')' | b']' | b'}'
                );
            assert_eq!(VALUE_STOP[usize::from(c)], rule, "byte {c:#x}");
        }
    }

    #[test]
    fn header_names_end_as_the_separator_prefilter_expects() {
        for h in HEADER_NAMES {
            assert!(
                h.ends_with("on") || h.ends_with("ey") || h.ends_with("en"),
                "{h}: extend the ending check in separator_rules"
            );
            for name in [h.to_string(), h.to_ascii_uppercase(), format!("x-{h}")] {
                assert!(
                    maybe_header_end(name.as_bytes(), name.len()),
                    "{name}: extend maybe_header_end"
                );
            }
        }
    }

    #[test]
    fn secret_names() {
        for n in [
            "OPENAI_API_KEY",
            "apiKey",
            "DB_PASSWORD",
            "GITHUBTOKEN",
            "x-api-key",
            "client_secret",
            "SENTRY_DSN",
            "AUTH",
        ] {
            assert!(secret_name(n), "{n}");
        }
        for n in [
            "MONKEY",
            "keyboard_layout",
            "TOKENIZER_NAME",
            "author",
            "passenger",
        ] {
            assert!(!secret_name(n), "{n}");
        }
    }

    #[test]
    fn shapes() {
        assert!(credential_shaped("wJalrXUtnFEMI/K7MDENG/bPxRfiCYzz1KEY"));
        assert!(!credential_shaped("4096"));
        assert!(!credential_shaped("self.token_value_2024"));
        assert!(!credential_shaped("${SECRET_VALUE_FROM_ENV}"));
        assert!(!credential_shaped("PreTrainedTokenizerFast"));
        assert!(!credential_shaped("/usr/local/bin/python3.11"));
        assert!(is_template("{{ vault_password }}"));
        assert!(!random_looking("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"));
    }
}

/// The separator and name checks as they were before their fast paths
/// (the reference the property tests compare with).
#[cfg(test)]
mod reference {
    use super::*;

    fn separator_rules_reference(b: &[u8], p: usize) -> u8 {
        // End of the name, backwards over blanks, `]` and a closing quote.
        let mut j = p;
        while j > 0 && (b[j - 1] == b' ' || b[j - 1] == b'\t') {
            j -= 1;
        }
        if j > 0 && b[j - 1] == b']' {
            j -= 1;
        }
        if j > 0 && matches!(b[j - 1], b'"' | b'\'' | b'`') {
            j -= 1;
        }
        let end = j;
        if end == 0 {
            return 0;
        }
        let last = b[end - 1] | 0x20;
        // Every header name ends in `…on`, `…ey` or `…en` (any case): only
        // those endings are looked up.
        if end >= 2
            && matches!(
                (b[end - 2] | 0x20, last),
                (b'o', b'n') | (b'e', b'y') | (b'e', b'n')
            )
            && let Some(h) = HEADER_NAMES.iter().find(|h| {
                end >= h.len() && b[end - h.len()..end].eq_ignore_ascii_case(h.as_bytes())
            })
        {
            // A header name is also a secret name: the assignment rule may apply too.
            return if *h == "authorization" {
                SEP_AUTH | SEP_ENV
            } else {
                SEP_APIHDR | SEP_ENV
            };
        }
        if !(b[end - 1].is_ascii_alphanumeric() || b[end - 1] == b'_') {
            return 0;
        }
        // Value, forwards: at least 16 bytes that could be a credential.
        if matches!(b.get(p + 1), Some(b'=')) {
            return 0;
        }
        let mut i = p + 1;
        while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
            i += 1;
        }
        let mut k = i;
        while k < b.len()
            && k < i + 2
            && matches!(b[k], b'r' | b'R' | b'b' | b'B' | b'u' | b'U' | b'f' | b'F')
        {
            k += 1;
        }
        if matches!(b.get(k), Some(b'"' | b'\'' | b'`')) {
            i = k + 1;
        }
        if b.len() < i + 16 {
            return 0;
        }
        // Branch-free over the 16 bytes (a byte table, not a match per byte).
        if b[i..i + 16]
            .iter()
            .fold(false, |any, &c| any | super::VALUE_STOP[usize::from(c)])
        {
            return 0;
        }
        // Only now the name itself.
        let lo = end.saturating_sub(128);
        let mut j = end;
        while j > lo && (b[j - 1].is_ascii_alphanumeric() || matches!(b[j - 1], b'_' | b'.' | b'-'))
        {
            j -= 1;
        }
        if secret_name_reference(&b[j..end]) {
            SEP_ENV
        } else {
            0
        }
    }

    fn secret_segment_reference(seg: &[u8]) -> bool {
        const WORDS: &[&str] = &[
            "key",
            "keys",
            "apikey",
            "token",
            "tokens",
            "secret",
            "secrets",
            "password",
            "passwords",
            "passwd",
            "pwd",
            "pass",
            "passphrase",
            "credential",
            "credentials",
            "creds",
            "cred",
            "auth",
            "bearer",
            "dsn",
            "webhook",
            "privatekey",
            "accesskey",
            "secretkey",
            "accesstoken",
            "authtoken",
            "sas",
        ];
        const SUFFIXES: &[&str] = &[
            "password",
            "passwd",
            "secret",
            "token",
            "apikey",
            "secretkey",
            "accesskey",
        ];
        if seg.is_empty() {
            return false;
        }
        WORDS.iter().any(|w| seg.eq_ignore_ascii_case(w.as_bytes()))
            || SUFFIXES.iter().any(|s| {
                seg.len() >= s.len()
                    && seg[seg.len() - s.len()..].eq_ignore_ascii_case(s.as_bytes())
            })
            || (seg.len() >= 8 && seg[..8].eq_ignore_ascii_case(b"password"))
    }

    /// The same splitting (unchanged by the fast path), the old segment check.
    fn secret_name_reference(name: &[u8]) -> bool {
        any_segment(name, secret_segment_reference)
    }

    use proptest::prelude::*;

    fn code() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            4 => prop::sample::select(vec![
                "Authorization", "PROXY-AUTHORIZATION", "x-api-key", "X-Auth-Token", "apikey",
                "rapidapi-key", "subscription-TOKEN", "api_key", "apiKey", "API_KEY", "token",
                "db_password", "PASSWORDFILE", "SECRET", "Private-Token", "monkey", "author",
                "region", "on", "EY", "en", "ken", "-key", "ikey", "name", "x", "_", "9",
                "creds", "webhookUrl", "sas", "DSN", "accessToken", "passphrase", "key",
            ]).prop_map(|s| s.as_bytes().to_vec()),
            4 => prop::sample::select(vec![
                "=", ":", "==", ": ", " = ", "\t:\t", "\"", "'", "`", "]", "\"]", "[\"",
                " ", "  ", "\t", "f\"", "rb'", "b", "\n", ",", ";", "&", ")", "}",
                "(", "{", "-", ".", "/", "+", "::",
            ]).prop_map(|s| s.as_bytes().to_vec()),
            3 => "[A-Za-z0-9+/_.-]{8,24}".prop_map(String::into_bytes),
            1 => proptest::collection::vec(any::<u8>(), 0..4),
        ];
        proptest::collection::vec(piece, 0..40).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn separator_rules_match_reference(input in code()) {
            for p in 0..input.len() {
                prop_assert_eq!(separator_rules(&input, p), separator_rules_reference(&input, p), "at {}", p);
            }
        }

        #[test]
        fn secret_segment_matches_reference(seg in "[A-Za-z0-9]{0,14}|(?i)(pass|key|token|secret|auth|cred|apikey|accesskey|secretkey|password|passwd|webhook|sas|dsn|pwd|bearer|privatekey|x){1,3}") {
            prop_assert_eq!(secret_segment(seg.as_bytes()), secret_segment_reference(seg.as_bytes()), "{}", seg);
        }
    }
}
