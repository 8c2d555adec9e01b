//! Cleaning what a kernel prints before anyone sees it: ANSI stripping,
//! progress-line collapsing and code-safe secret redaction. For users:
//! docs/result.md ("output") and SECURITY.md
//! ("Secrets are redacted from everything toolcell returns, stores or writes").
//!
//! Everything a cell writes to stdout or stderr reaches the host as raw
//! bytes. Before those bytes are counted, truncated, spilled to disk, logged
//! or shown to an agent, they go through this crate:
//!
//! ```text
//! pipe bytes ──► AnsiStripper ──► RedactStream ──► head/tail capture, spill file, live chunks
//!               (bytes → text)    (text → text)
//!               └──────────── Cleaner ────────┘
//! ```
//!
//! Both stages exist as a whole-text function ([`strip_ansi`],
//! [`Redactor::redact`]) and as a streaming type fed chunk by chunk
//! ([`AnsiStripper`], [`RedactStream`]); [`Cleaner`] chains the two streaming
//! stages and is what the kernel crate keeps per output stream. A streaming
//! type's output never depends on how its input was split: it is exactly the
//! whole-text result (property-tested and fuzzed).
//!
//! ```
//! use toolcell_redact::{Cleaner, Redactor};
//!
//! // Built once per host: the host's own secret env values plus the built-in rules.
//! let redactor = Redactor::new(["hunter2-but-longer"]).unwrap();
//!
//! // One cleaner per stream of a cell.
//! let mut stdout = Cleaner::new(&redactor);
//! let mut shown = String::new();
//! for chunk in [&b"\x1b[32mconnecting\x1b[0m with hunter2-but"[..], b"-longer\n", b" 10%\r100%\n"] {
//!     stdout.push(chunk, &mut shown);
//! }
//! stdout.finish(&mut shown); // end of the cell: flush what was held back
//! assert_eq!(shown, "connecting with «redacted:secret»\n100%\n");
//!
//! // Ordinary source code passes byte-identical.
//! let code = "api_key = os.environ[\"OPENAI_API_KEY\"]\nMAX_TOKENS=4096\n";
//! assert_eq!(redactor.redact(code), code);
//! ```
//!
//! # ANSI and control handling
//!
//! [`AnsiStripper`] takes bytes and produces valid UTF-8:
//!
//! - CSI sequences (7-bit `ESC [` and 8-bit `0x9B`, any parameters and
//!   intermediates: SGR including colon truecolor, DEC private modes, cursor
//!   moves), OSC (ended by BEL or ST; an OSC 8 hyperlink keeps its visible
//!   text), DCS/SOS/PM/APC strings, nF and Fp/Fe/Fs escapes are removed.
//! - C1 controls are removed, whether a raw byte 0x80–0x9F that is *not* part
//!   of a valid UTF-8 sequence, or U+0080–U+009F encoded as UTF-8 (`C2 80`–`C2 9F`).
//!   Continuation bytes inside valid UTF-8 are never touched.
//! - C0 controls other than `\n` and `\t` are removed, and DEL too.
//! - `\r\n` becomes `\n` (as a terminal shows it). A `\r` not followed by
//!   `\n` returns to the start of the line: the next visible text starts the
//!   line over, so `10%\r50%\r100%\n` becomes `100%\n`. A `\r` followed by
//!   nothing visible (end of stream, `\n`) leaves the line as it was, as a
//!   terminal does.
//! - Backspace erases one character of the current line (never past its start).
//! - Invalid UTF-8 becomes U+FFFD (one per maximal invalid subpart, as
//!   [`String::from_utf8_lossy`] does).
//! - An unterminated escape at the end of the input is dropped; in a stream it
//!   simply continues in the next chunk. Escape bytes are discarded as they
//!   arrive, so nothing is buffered for them. A string sequence (OSC, DCS…)
//!   missing its terminator ends at the next `\n`, so a stray `ESC ]` can never
//!   swallow more than one line.
//! - Text without ESC or controls is copied in bulk: a vectorizable scan finds
//!   the next byte that is not printable ASCII, `\n` or `\t`.
//!
//! Because `\r` and backspace can still erase it, the current line is held
//! back until its `\n`; it is committed anyway once it reaches
//! [`HELD_LINE_LIMIT`] (64 KiB), a rule that depends only on the bytes so
//! split invariance holds exactly.
//!
//! # Secret redaction
//!
//! A match becomes `«redacted:<kind>»`. Kinds:
//!
//! | kind | what |
//! |---|---|
//! | `openai_key`, `anthropic_key` | `sk-…`, `sk-proj-…`, `sk-ant-api03-…` |
//! | `github_token` | `ghp_ gho_ ghu_ ghs_ ghr_ github_pat_` |
//! | `gitlab_token` | `glpat-` and kin (`gldt- glptt- glrt- gloas- …`) |
//! | `slack_token` | `xox[abposr]-`, `xapp-` |
//! | `aws_access_key` | `AKIA…`, `ASIA…` and the other IAM id prefixes |
//! | `google_api_key`, `google_oauth_token` | `AIza…`, `ya29.…` |
//! | `stripe_key` | `sk_live_ rk_live_ sk_test_ rk_test_ whsec_` |
//! | `sendgrid_key`, `huggingface_token`, `npm_token`, `pypi_token`, `digitalocean_token`, `replicate_token` | `SG.… hf_ npm_ pypi-AgE… dop_v1_ r8_` |
//! | `groq_key`, `xai_key`, `perplexity_key`, `shopify_token`, `linear_key`, `doppler_token`, `atlassian_token`, `grafana_token`, `sentry_token`, `vault_token`, `docker_token`, `netlify_token`, `notion_token`, `figma_token`, `azure_storage_key`, `age_secret_key`, `databricks_token`, `tailscale_key`, `square_token`, `postman_key`, `supabase_token`, `langsmith_key`, `pinecone_key` | their documented prefixes |
//! | `jwt` | `eyJ….ey….sig` |
//! | `private_key` | a whole PEM `BEGIN … PRIVATE KEY` block, multi-line or with `\n` escapes (JSON) |
//! | `url_password`, `url_token` | `scheme://user:PASSWORD@host`, `https://LONGTOKEN@host` |
//! | `authorization` | `Authorization:`/`Proxy-Authorization:` credentials (the scheme word is kept) |
//! | `api_key_header` | `x-api-key`, `api-key`, `x-auth-token`, `private-token`, … header values |
//! | `env_secret` | `NAME=value` / `name: value` where NAME has a secret word and the value is credential-shaped |
//! | `secret` | an exact value registered with [`Redactor::new`] (the host's secret env values) |
//!
//! ## Code-safe rules
//!
//! A cell often prints source code; redaction must never corrupt it. So:
//!
//! - **Token boundaries.** A vendor prefix only counts at the start of a token
//!   (not after a letter, digit, `_`, `-` or `.`), its body has a bounded
//!   length and must end there, and the body must look random (a digit or
//!   both letter cases, or 32+ characters; no run of 8 identical
//!   characters). Not masked:
//!   `sk-learn`, `task-runner`, `risk-free`, `r"sk-[a-z]+"`,
//!   `hf_hub_download`, `sk-xxxxxxxx…` placeholders.
//! - **Templates and references are never values**, in any rule: `$X`,
//!   `${X}`, `{{ x }}`, `{x}`, `%s`, `%(x)s`, `<your-key>`, f-strings
//!   (`f"{pw}"`), `os.environ[...]`, function calls, attribute paths
//!   (`settings.API_KEY`). Not masked: `api_key = os.environ["X"]`,
//!   `password = f"{pw}"`, `headers = {"Authorization": f"Bearer {tok}"}`,
//!   `"Authorization": "Bearer " + token`, `curl -H "Authorization: Bearer $TOKEN"`.
//! - **Env-dump values must be credential-shaped**: at least 16 characters,
//!   printable ASCII without spaces, letters *and* digits (or three character
//!   classes), not a path, not a URL, not an expression. Not masked:
//!   `MAX_TOKENS=4096`, `token: CPU`, `TOKENIZERS_PARALLELISM=false`,
//!   `PASSWORD_FILE=/run/secrets/db_password_2024`. Masked:
//!   `DB_PASSWORD=Xk9#mQ2vL8pR4wZt`, `"password": "x9aJTFMP9!2kUtMXhkPrSbbA"`,
//!   `aws_secret_access_key = uHgx…+YNBD…` (INI style).
//! - **Secret names are word segments**: the name is split at `_`, `-`, `.`
//!   and camelCase humps, and a segment must be a secret word (`key`, `token`,
//!   `secret`, `password`, `passwd`, `pwd`, `auth`, `credentials`, `dsn`,
//!   `webhook`, …) or end in one (`githubtoken`). `monkey`, `keyboard`,
//!   `tokenizer`, `author` are not secret names.
//! - **Unquoted values in code are expressions.** `name = value` with blanks
//!   around `=` is taken only when the value cannot be a Python name (it has
//!   `+`, `/`, `-`… or reads as random); a keyword argument `f(token=x)` is
//!   only masked when its value is a quoted literal.
//! - **Header values** in a quoted-key form (`{"Authorization": token}`) must
//!   be string literals; in header form (`Authorization: Bearer …`) the
//!   credential must be the value's only token (4+ characters, not a
//!   template or a placeholder word such as `token`), so prose like
//!   "Authorization: Bearer tokens are…" is left alone. URL passwords are
//!   masked unless they are templates (`{pw}`, `$PW`, `%s`, `<pw>`, `***`).
//! - **Private keys** are masked only with key material: a `BEGIN … PRIVATE
//!   KEY` marker followed by a base64 body (on the next lines, or after `\n`
//!   escapes on the same line). Code that merely mentions the marker is untouched.
//!
//! ## Streaming and the held-back bound
//!
//! Redaction works on lines. A [`RedactStream`] judges each complete line as
//! it arrives and holds back only the current incomplete line. A line longer
//! than [`LINE_MAX`] + [`MAX_TOKEN`] (24 KiB) is judged in windows: each
//! window writes one step of at most [`LINE_MAX`] (16 KiB; cut after the
//! last blank or punctuation byte in the step's last 4 KiB, else at 16 KiB),
//! but judges it together with [`MAX_TOKEN`] (8 KiB) of lookahead after the
//! cut and [`MAX_TOKEN`] of already written context before it. A masked match
//! crossing the cut moves the cut to the match's end, and the next window
//! starts there, seeing the same match in its context. So no match of up to
//! [`MAX_TOKEN`] bytes (every vendor key, JWT, assignment value and exact
//! secret piece) is ever split between two judgements, wherever the line is
//! cut; every decision depends only on the text. After a line ending in a
//! `BEGIN … PRIVATE KEY` marker, that line's last window is held until the
//! next line shows whether key material follows; so at most [`MAX_HELD`]
//! (about 64 KiB) is held in all. Inside a key block, base64 lines are
//! dropped as they come (no buffering) until the `END` line. Whole-text
//! [`Redactor::redact`] is defined as one push plus finish, so the two agree
//! for every split.
//!
//! Limits of the line model: a secret that spans a line break is not
//! recognised as one token (exact secrets containing line breaks are
//! registered line by line for this reason; an exact secret line longer than
//! [`MAX_TOKEN`] is registered in pieces). URL passwords, header values and
//! single-line PEM bodies longer than [`MAX_TOKEN`] are masked as far as a
//! window reaches.
//!
//! ## Speed
//!
//! Redaction first looks for *candidate lines*, then runs regexes only there:
//!
//! - the vendor prefixes, `eyJ`, `-----BEGIN` and `://` (63 literals,
//!   case-sensitive, since vendors print their prefixes in one case) are
//!   found with three SIMD (Slim Teddy) searches: the 3-byte literals apart
//!   from the longer ones so that the long ones keep 4-byte fingerprints, and
//!   the longer ones in two groups of at most 32 (more would make one Fat
//!   Teddy search, half as many bytes a step); each hit gets a cheap check (a
//!   token start, an `@` after `://`);
//! - the name/header rules are anchored on their separator instead of on
//!   words like `key` or `token` (which are everywhere in code): every `=`
//!   and `:` (memchr) is checked for a header name before it, or for a secret
//!   name before it *and* at least 16 value bytes after it (a check written
//!   to take few mispredicted branches: it runs 1.4 M times per 64 MiB of
//!   code);
//! - exact secrets have their own case-sensitive Aho–Corasick search.
//!
//! Only a candidate line runs the regexes of the rules its hits enabled;
//! everything between candidates is copied in bulk, and a text without
//! candidates is returned borrowed. Each pattern is compiled once per
//! process, the first time a line needs it.
//!
//! The stripper's ground state runs on 64-byte blocks (AVX2, detected at run
//! time): each block is classified once into bitmasks (bytes needing
//! attention, `ESC [`, CSI parameter and final bytes), then walked with
//! `tzcnt`, copying each text run with two 32-byte load/stores and skipping
//! each complete CSI sequence, with no per-byte branch. Valid UTF-8 runs are
//! copied after one validation, and the start of the current line is
//! tracked lazily (only `\r`, backspace and the 64 KiB commit need it).
//! Figures are in `BENCHMARKS.md` ("redact / ansi").
//!
//! # Head/tail cuts
//!
//! [`HeadTail`] (streaming) and [`HeadTailCut`] (whole text, in bytes or
//! characters) keep the first 40% and the last 60% of a limit around a
//! [`truncation_notice`], never splitting a UTF-8 character; [`Utf8Stream`]
//! decodes raw pipe bytes for them. Every cut of output in toolcell goes
//! through them, after redaction.
//!
//! ## Deviations from the original API sketch
//!
//! [`Redactor::new`] returns a `Result`: building the automaton over
//! caller-supplied secret values can fail in principle (size limits), and a
//! redactor silently missing the host's secrets must not exist.

mod ansi;
mod clean;
mod cut;
#[doc(hidden)]
pub mod fuzzing;
mod redact;
mod rules;
mod simd;

pub use ansi::{AnsiStripper, HELD_LINE_LIMIT, strip_ansi};
pub use clean::{Cleaner, SECRET_ENV_WORDS, is_secret_env_name};
pub use cut::{
    HEAD_PERCENT, HeadTail, HeadTailCut, Kept, KeptParts, Unit, Utf8Stream, head_limit,
    truncation_notice,
};
pub use redact::{
    LINE_MAX, MAX_HELD, MAX_TOKEN, MIN_EXACT_SECRET_LEN, RedactError, RedactStream, Redactor,
};
