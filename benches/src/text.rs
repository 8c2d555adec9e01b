//! Inputs for the `ansi` and `redact` benches: English prose mixed with
//! source code, the same with one secret per 4 KiB, colored compiler output
//! (an escape every ~30 bytes) and pip/tqdm progress output.

use crate::Rng;

const PROSE: &[&str] = &[
    "The quick brown fox jumps over the lazy dog while the compiler checks every borrow.\n",
    "In this section we describe how the kernel keeps variables alive between cells.\n",
    "Results were averaged over five runs; the variance was small enough to ignore.\n",
    "Each request carries a token that the host checks in constant time before dispatch.\n",
    "Note that the output is truncated when it exceeds the configured cap of fifty thousand bytes.\n",
    "We found 42 files matching the pattern, 3 of which were larger than one megabyte.\n",
    "The author recommends passing the configuration explicitly rather than relying on defaults.\n",
    "Training finished after 12 epochs with a validation loss of 0.2314 and accuracy 91.2%.\n",
];

const CODE: &[&str] = &[
    "def load_config(path: str) -> dict:\n",
    "    with open(path, encoding=\"utf-8\") as fh:\n",
    "        return json.load(fh)\n",
    "for key, value in sorted(config.items()):\n",
    "    print(f\"{key:>20} = {value!r}\")\n",
    "api_key = os.environ[\"OPENAI_API_KEY\"]\n",
    "client = OpenAI(api_key=api_key, timeout=30)\n",
    "MAX_TOKENS = 4096\n",
    "let mut buf = Vec::with_capacity(64 * 1024);\n",
    "    if token.is_empty() { return Err(Error::MissingToken); }\n",
    "SELECT id, name, created_at FROM users WHERE active = true ORDER BY id;\n",
    "df = pd.read_csv(\"https://example.com/data/sales.csv\", parse_dates=[\"date\"])\n",
    "    return {\"status\": \"ok\", \"items\": items, \"count\": len(items)}\n",
    "import numpy as np; x = np.linspace(0, 1, 100); y = np.sin(2 * np.pi * x)\n",
];

const SECRETS: &[&str] = &[
    "export OPENAI_API_KEY=sk-proj-u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8dKLzdocJ2isAj_IhKtJ0RlgLKOm\n",
    "GITHUB_TOKEN=ghp_D53X83RZJzzzzgEOzdmenCkhvMdgaKjIg8xN\n",
    "aws_access_key_id = AKIARI3QZJ7UFRDL3ERB\n",
    "DATABASE_URL=postgres://app:Xk9mQ2vL8pR4wZt@db.internal:5432/app\n",
    "> Authorization: Bearer o09jwQO10Y0ADsWJPiX1EwY2orTyRqBR\n",
    "DB_PASSWORD=Xk9#mQ2vL8pR4wZt\n",
    "id_token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c\n",
    "stripe.api_key = \"sk_live_NKiaEdFrRgSnRFsTHsDDDXh5\"\n",
];

/// `len` bytes (give or take a line) of prose and code, no escapes, no secrets.
pub fn clean_text(len: usize) -> String {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut s = String::with_capacity(len + 128);
    while s.len() < len {
        let pool = if rng.next().is_multiple_of(3) {
            PROSE
        } else {
            CODE
        };
        s.push_str(rng.pick(pool));
    }
    s
}

/// Like [`clean_text`] with one secret line inserted every 4 KiB.
pub fn text_with_secrets(len: usize) -> String {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let mut s = String::with_capacity(len + 256);
    let mut next_secret = 4096;
    while s.len() < len {
        if s.len() >= next_secret {
            s.push_str(rng.pick(SECRETS));
            next_secret += 4096;
        }
        let pool = if rng.next().is_multiple_of(3) {
            PROSE
        } else {
            CODE
        };
        s.push_str(rng.pick(pool));
    }
    s
}

/// Colored compiler output: SGR escapes about every 30 bytes.
pub fn colored_output(len: usize) -> Vec<u8> {
    const LINES: &[&str] = &[
        "\x1b[0m\x1b[1m\x1b[38;5;9merror[E0308]\x1b[0m\x1b[0m\x1b[1m: mismatched types\x1b[0m\n",
        "\x1b[0m \x1b[0m\x1b[0m\x1b[1m\x1b[38;5;12m--> \x1b[0m\x1b[0msrc/main.rs:4:18\x1b[0m\n",
        "\x1b[0m  \x1b[0m\x1b[0m\x1b[1m\x1b[38;5;12m|\x1b[0m\n",
        "\x1b[0m\x1b[1m\x1b[38;5;12m4\x1b[0m\x1b[0m \x1b[0m\x1b[0m\x1b[1m\x1b[38;5;12m|\x1b[0m\x1b[0m     let x: i32 = \"hello\";\x1b[0m\n",
        "\x1b[0m\x1b[1m\x1b[33mwarning\x1b[0m\x1b[1m: unused variable: `y`\x1b[0m\n",
        "\x1b[32m   Compiling\x1b[0m serde v1.0.210\n",
        "src/lib.rs:10:5: \x1b[01;35mwarning: \x1b[0munused variable \x1b[01m\x1b[K'n'\x1b[m\x1b[K\n",
    ];
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut v = Vec::with_capacity(len + 256);
    while v.len() < len {
        v.extend_from_slice(rng.pick(LINES).as_bytes());
    }
    v
}

/// pip and tqdm progress output: many `\r`-overwritten states per line.
pub fn progress_output(len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 256);
    let mut n = 0u64;
    while v.len() < len {
        n += 1;
        if n.is_multiple_of(2) {
            for pct in (0..=100).step_by(5) {
                let bar = "█".repeat(pct / 10);
                let pad = " ".repeat(10 - pct / 10);
                let line = format!(
                    "\r{pct:3}%|{bar}{pad}| {}/1000 [00:01<00:01, 812.33it/s]",
                    pct * 10
                );
                v.extend_from_slice(line.as_bytes());
            }
            v.push(b'\n');
        } else {
            v.extend_from_slice(b"Collecting numpy\n  Downloading numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.whl (16.3 MB)\n");
            for step in 0..20 {
                let line = format!(
                    "\r\x1b[2K     \x1b[91m{}\x1b[0m\x1b[90m{}\x1b[0m \x1b[32m{:.1}/16.3 MB\x1b[0m \x1b[31m12.1 MB/s\x1b[0m eta \x1b[36m0:00:01\x1b[0m",
                    "━".repeat(step * 2),
                    "╺".repeat(40 - step * 2),
                    step as f64 * 0.8
                );
                v.extend_from_slice(line.as_bytes());
            }
            v.extend_from_slice(b"\r\n");
        }
    }
    v
}

/// Input size for a bench: `full` under `cargo bench`, 1 MiB when criterion
/// runs the bench as a test (`cargo test --benches`), so that stays fast.
pub fn bench_len(full: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test") {
        full
    } else {
        1 << 20
    }
}
