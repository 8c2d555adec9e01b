//! Table tests: real-looking secrets in many contexts must be masked (and never
//! leak, not even their first 8 characters); ordinary source code, configs and
//! data must come out byte-identical.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use toolcell_redact::Redactor;

use crate::samples::positives;

/// Text that must come out byte-identical.
fn negatives() -> Vec<&'static str> {
    vec![
        // Python
        "MAX_TOKENS=4096",
        "api_key = os.environ[\"OPENAI_API_KEY\"]",
        "api_key = os.getenv('OPENAI_API_KEY')",
        "token: CPU",
        "password = f\"{pw}\"",
        "headers = {\"Authorization\": f\"Bearer {tok}\"}",
        "headers = {\"Authorization\": \"Bearer \" + token}",
        "pattern = re.compile(r\"sk-[a-z]+\")",
        "if key.startswith(\"sk-\"):",
        "from sklearn.model_selection import train_test_split  # sk-learn",
        "client = OpenAI(api_key=api_key)",
        "client = OpenAI(api_key=settings.OPENAI_API_KEY_PRODUCTION)",
        "for key, value in sorted(config.items()):",
        "tokenizer = AutoTokenizer.from_pretrained(\"bert-base-uncased\")",
        "secret = get_secret(name=\"prod/db/password\", version_stage=\"AWSCURRENT\")",
        "password: str = Field(..., min_length=16, description=\"user password\")",
        "if token == expected_token:",
        "self.api_key = api_key or os.environ.get(\"ANTHROPIC_API_KEY\")",
        "TOKEN_PATTERN = r\"(?u)\\b\\w\\w+\\b\"",
        "raise ValueError(\"Authorization header missing\")",
        "auth = requests.auth.HTTPBasicAuth(user, password)",
        "def get_auth_token(self) -> str:",
        "print(f\"key={key!r} value={value!r}\")",
        "hf_hub_download(repo_id=\"gpt2\", filename=\"config.json\")",
        "secret_key = secrets.token_urlsafe(32)",
        "password = getpass.getpass()",
        "db_password = vault.read(\"secret/data/db\")[\"data\"][\"password\"]",
        "url = f\"https://{user}:{password}@{host}/{db}\"",
        "conn = psycopg2.connect(f\"postgres://{USER}:{PW}@db:5432/app\")",
        "TOKENIZERS_PARALLELISM=false",
        "keyboard_layout = \"us-intl-altgr-dead-keys-2024\"",
        // Shell
        "export OPENAI_API_KEY=$OPENAI_API_KEY",
        "export GITHUB_TOKEN=\"${GITHUB_TOKEN}\"",
        "curl -H \"Authorization: Bearer $TOKEN\" https://api.github.com/user",
        "curl -H \"X-API-Key: ${API_KEY}\" https://example.com",
        "git clone https://github.com/rust-lang/regex.git",
        "task-runner --risk-free --desk-check --disk-usage",
        "AWS_PROFILE=dev aws s3 ls s3://my-bucket/ --recursive",
        "PASSWORD_FILE=/run/secrets/db_password_2024",
        // JSON / YAML / config
        "{\"max_tokens\": 4096, \"temperature\": 0.7, \"model\": \"gpt-4o-mini\"}",
        "{\"token_type\": \"bearer\", \"expires_in\": 3600}",
        "password: \"{{ vault_db_password }}\"",
        "api_key: ${OPENAI_API_KEY}",
        "secretName: my-app-tls-certificate",
        "  auth:\n    type: oauth2\n    token_url: https://auth.example.com/oauth/token\n",
        "[tool.poetry]\nname = \"toolcell\"\nkeywords = [\"ansi\", \"redaction\"]\n",
        "api_key = \"<your-api-key-here>\"",
        "OPENAI_API_KEY=sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        // SQL
        "SELECT id, password_hash, api_key_id FROM users WHERE token_expires_at < NOW();",
        "CREATE TABLE secrets (id SERIAL PRIMARY KEY, key TEXT NOT NULL, value BYTEA);",
        "UPDATE accounts SET password = crypt($1, gen_salt('bf')) WHERE id = $2;",
        // minified JS
        "!function(e,t){\"object\"==typeof exports?module.exports=t():e.apiKey=t()}(this,function(){var a={token:null,key:\"\"};return function(n){a.token=n.token||a.token;return a}});",
        // data
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
        "request_id=550e8400-e29b-41d4-a716-446655440000 status=200",
        "commit 2983475eb46c5296f62e338d74ff1fe4f7f505ae\nAuthor: Jane Doe <jane@example.com>\n",
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "md5sum: d41d8cd98f00b204e9800998ecf8427e  empty.txt",
        "very_long_identifier_name_for_the_tokenizer_configuration_object_instance",
        "AbstractSingletonProxyFactoryBeanTokenKeySecretProvider",
        // prose, logs, tracebacks
        "The Authorization header must carry a bearer token.",
        "Authorization: Bearer tokens are described in RFC 6750.",
        "Epoch 3/10 - loss: 0.2345 - accuracy: 0.9123 - val_loss: 0.3456",
        "  File \"/usr/lib/python3.11/site-packages/requests/auth.py\", line 42, in __call__\n    r.headers['Authorization'] = _basic_auth_str(self.username, self.password)\n",
        "KeyError: 'api_key'",
        "Visit https://docs.python.org/3/library/secrets.html for details.",
        "ssh git@github.com: Permission denied (publickey).",
        "The ASIAN markets opened higher; AKIA is not a word.",
        "Monkey keys: the keyboard key was pressed.",
        "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ\n-----END CERTIFICATE-----\n",
        "if pem.startswith(\"-----BEGIN RSA PRIVATE KEY-----\"):",
        "PUBLIC_KEY=ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host",
        "Email me at someone@example.com or visit http://example.com/path?q=1",
        "résumé naïve café 漢字 😀 — em dash",
    ]
}

#[test]
fn tables_are_big_enough() {
    assert!(positives().len() >= 60, "{}", positives().len());
    assert!(negatives().len() >= 60, "{}", negatives().len());
}

#[test]
fn positives_are_masked_with_their_kind() {
    let r = Redactor::builtin();
    let mut failures = Vec::new();
    for (input, secret, kind) in positives() {
        let out = r.redact(&input);
        let mask = format!("«redacted:{kind}»");
        if !out.contains(&mask) || out.contains(secret) {
            failures.push(format!(
                "input: {input:?}\n  out: {out:?}\n want kind {kind}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn secret_never_in_output_not_even_first_8_chars() {
    let r = Redactor::builtin();
    for (input, secret, _) in positives() {
        let out = r.redact(&input);
        let head: String = secret.chars().take(8).collect();
        assert!(!out.contains(secret), "{input:?} -> {out:?}");
        assert!(
            !out.contains(&head),
            "first 8 chars {head:?} leaked: {input:?} -> {out:?}"
        );
        // Same through the stream API, fed in small pieces.
        let mut st = r.stream();
        let mut streamed = String::new();
        let chars: Vec<char> = input.chars().collect();
        for piece in chars.chunks(7) {
            let s: String = piece.iter().collect();
            st.push(&s, &mut streamed);
        }
        st.finish(&mut streamed);
        assert_eq!(streamed, out.as_ref(), "stream differs for {input:?}");
    }
}

#[test]
fn negatives_are_byte_identical() {
    let r = Redactor::builtin();
    let mut failures = Vec::new();
    for input in negatives() {
        let out = r.redact(input);
        if out != input {
            failures.push(format!("input: {input:?}\n  out: {out:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn exact_secrets_are_masked_wherever_they_appear() {
    let r = Redactor::new(["plainvalue-not-shaped", "short", "Tr1cky$Value"]).unwrap();
    assert_eq!(
        r.exact_secret_count(),
        2,
        "values under 8 bytes are ignored"
    );
    let out = r.redact("a=plainvalue-not-shaped, b=xTr1cky$Valuex, c=short\n");
    assert_eq!(out, "a=«redacted:secret», b=x«redacted:secret»x, c=short\n");
    // Inside a line that also has a builtin hit, and at a position where a
    // builtin literal starts.
    let r = Redactor::new(["keyABCDEFGH"]).unwrap();
    assert_eq!(r.redact("keyABCDEFGH"), "«redacted:secret»");
    assert_eq!(
        r.redact("token keyABCDEFGH api_key = x"),
        "token «redacted:secret» api_key = x"
    );
}

#[test]
fn clean_text_is_returned_borrowed() {
    let r = Redactor::builtin();
    let t = "fn main() {\n    let key = map.get(\"k\");\n}\n";
    assert!(matches!(r.redact(t), std::borrow::Cow::Borrowed(_)));
}

#[test]
fn secret_env_names_follow_spec_words() {
    use toolcell_redact::is_secret_env_name;
    for n in [
        "OPENAI_API_KEY",
        "gh_token",
        "SENTRY_DSN",
        "SLACK_WEBHOOK_URL",
        "DB_PASSWD",
        "AWS_CREDS",
    ] {
        assert!(is_secret_env_name(n), "{n}");
    }
    for n in ["PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV"] {
        assert!(!is_secret_env_name(n), "{n}");
    }
}

#[test]
fn chained_assignments_on_one_long_line_are_handled() {
    // Thousands of `NAME=` on one line (each a candidate): every separator is
    // judged on a bounded window, and the real value is still masked.
    let r = Redactor::builtin();
    let input = format!("{}Xk9mQ2vL8pR4wZt7\n", "TOKEN=".repeat(3000));
    let out = r.redact(&input);
    assert!(
        !out.contains("Xk9mQ2vL"),
        "{}",
        &out[out.len().saturating_sub(80)..]
    );
    assert!(out.contains("«redacted:env_secret»"));
}
