# toolcell kernel runner for R (Rscript, R 4.x; base R only, jsonlite for tools).
#
# The in-band protocol (see README.md beside this file). The bootstrap
# (BOOTSTRAP_R in language.rs) starts the *relay*, a small perl (or awk) process that
# alone reads the host's requests on stdin: it forwards them to this runner
# line by line (`.relay`, a pipe), turns an `interrupt` request into SIGINT
# for us, and on EOF (the host is gone) kills our process group at once, even
# in the middle of a busy cell. The bootstrap reads the runner and the stub
# module through the relay too, then evaluates this file in a private
# environment (parent: base) holding `.relay`, `.relay_pid`, `.stubs` and
# `.kdir` (the kernel directory; NA on a remote, where figures travel in
# `file` frames). Frames "\n" SENTINEL " " <length> "\n" <JSON> go to
# private descriptors of stdout and stderr; tool calls are `tool_call`
# frames answered by `tool_reply` request lines. Cells run in the global
# environment.

PROTOCOL <- 1L
# R's JIT would byte-compile each runner function on its first or second
# call (about 200 ms at start, and no faster per cell for this code, which
# mostly calls builtins): it is off while runner code runs and on, at the
# level the session had (R_ENABLE_JIT, default 3), while a cell's code runs.
JIT_OFF <- function() .Internal(enableJIT(0L))
# The original, before install_world() wraps it for the cells.
READ_LINES <- base::readLines
REAL_QUIT <- base::quit
REMOTE <- is.na(.kdir) || !nzchar(.kdir)
KDIR <- if (REMOTE) tempdir() else .kdir
ARTIFACTS <- file.path(KDIR, if (REMOTE) "toolcell-artifacts" else "artifacts")
REQ <- .relay

# ---------------------------------------------------------------------------
# JSON: a small encoder and a tokenizer-based decoder (loading jsonlite
# would double the start time; the tools use it, lazily).
# ---------------------------------------------------------------------------

json_str <- function(s) {
  s <- enc2utf8(as.character(s))
  # Most strings (ids, short tracebacks, names) need no escape at all.
  if (!grepl("\"", s, fixed = TRUE) && !grepl("\\", s, fixed = TRUE) &&
      !grepl("[\001-\037]", s, useBytes = TRUE)) return(paste0("\"", s, "\""))
  s <- gsub("\\", "\\\\", s, fixed = TRUE)
  s <- gsub("\"", "\\\"", s, fixed = TRUE)
  s <- gsub("\n", "\\n", s, fixed = TRUE)
  s <- gsub("\r", "\\r", s, fixed = TRUE)
  s <- gsub("\t", "\\t", s, fixed = TRUE)
  if (grepl("[\001-\037]", s, useBytes = TRUE)) {
    for (code in c(1:8, 11:12, 14:31)) {
      ch <- rawToChar(as.raw(code))
      s <- gsub(ch, sprintf("\\u%04x", code), s, fixed = TRUE)
    }
  }
  paste0("\"", s, "\"")
}

to_json <- function(x) {
  if (is.null(x)) return("null")
  if (is.list(x)) {
    nm <- names(x)
    if (!is.null(nm)) {
      parts <- vapply(seq_along(x), function(i) paste0(json_str(nm[[i]]), ":", to_json(x[[i]])), "")
      return(paste0("{", paste(parts, collapse = ","), "}"))
    }
    return(paste0("[", paste(vapply(x, to_json, ""), collapse = ","), "]"))
  }
  if (is.logical(x)) return(if (isTRUE(x)) "true" else "false")
  if (is.numeric(x)) return(if (is.finite(x)) format(x, digits = 15, scientific = FALSE) else "0")
  json_str(x)
}

json_unescape <- function(s) {
  if (!grepl("\\", s, fixed = TRUE)) return(s)
  m <- gregexpr("\\\\(u[0-9a-fA-F]{4}(\\\\u[0-9a-fA-F]{4})?|.)", s, perl = TRUE)
  regmatches(s, m) <- list(vapply(regmatches(s, m)[[1]], function(e) {
    c <- substr(e, 2, 2)
    switch(c,
      n = "\n", t = "\t", r = "\r", b = "\b", f = "\f", "/" = "/", "\\" = "\\", "\"" = "\"",
      u = {
        hi <- strtoi(substr(e, 3, 6), 16L)
        if (nchar(e) == 12L && hi >= 0xD800 && hi <= 0xDBFF) {
          lo <- strtoi(substr(e, 9, 12), 16L)
          intToUtf8(0x10000 + (hi - 0xD800) * 1024 + (lo - 0xDC00))
        } else if (nchar(e) == 12L) {
          paste0(intToUtf8(hi), intToUtf8(strtoi(substr(e, 9, 12), 16L)))
        } else intToUtf8(hi)
      },
      e)
  }, ""))
  s
}

from_json <- function(text) {
  m <- gregexpr("\"(?:[^\"\\\\]|\\\\.)*\"|-?[0-9][0-9.eE+-]*|true|false|null|[{}\\[\\]:,]", text, perl = TRUE)
  toks <- regmatches(text, m)[[1]]
  pos <- 1L
  value <- function() {
    t <- toks[[pos]]
    pos <<- pos + 1L
    first <- substr(t, 1, 1)
    if (first == "{") {
      out <- list()
      if (toks[[pos]] == "}") { pos <<- pos + 1L; return(out) }
      repeat {
        k <- json_unescape(substr(toks[[pos]], 2, nchar(toks[[pos]]) - 1L))
        pos <<- pos + 2L
        v <- value()
        out[k] <- list(v)
        sep <- toks[[pos]]
        pos <<- pos + 1L
        if (sep == "}") return(out)
      }
    }
    if (first == "[") {
      out <- list()
      if (toks[[pos]] == "]") { pos <<- pos + 1L; return(out) }
      repeat {
        out[[length(out) + 1L]] <- value()
        sep <- toks[[pos]]
        pos <<- pos + 1L
        if (sep == "]") return(out)
      }
    }
    if (first == "\"") return(json_unescape(substr(t, 2, nchar(t) - 1L)))
    if (t == "true") return(TRUE)
    if (t == "false") return(FALSE)
    if (t == "null") return(NULL)
    as.numeric(t)
  }
  value()
}

# ---------------------------------------------------------------------------
# Descriptors and frames
# ---------------------------------------------------------------------------

# Private descriptors of the stdout and stderr pipes (a cell that closes or
# redirects fd 1 or 2 cannot cut the frame channel); where they cannot be
# reopened (a socket), a `cat` child writes the frames to them.
private_out <- function(fd) {
  tryCatch(file(sprintf("/proc/self/fd/%d", fd), open = "wb", raw = TRUE),
           error = function(e) pipe(if (fd == 2L) "exec cat >&2" else "exec cat", open = "wb"))
}
OUT <- private_out(1L)
ERR <- private_out(2L)
MARK <- NULL

# The relay alone reads the request pipe: our fd 0 becomes /dev/null, so a
# cell's subprocess (system("cat")) reads nothing from the host.
STDIN_NULL <- local({
  closed <- tryCatch({ parallel:::closeFD(0L); TRUE }, error = function(e) FALSE)
  if (closed) file("/dev/null", open = "r") else NULL
})

send_body <- function(con, body) {
  body <- charToRaw(enc2utf8(body))
  header <- charToRaw(paste0(MARK, length(body), "\n"))
  if (length(header) + length(body) <= 4096L) {
    writeBin(c(header, body), con)
  } else {
    writeBin(header, con)
    flush(con)
    writeBin(body, con)
  }
  flush(con)
}

send <- function(con, obj) send_body(con, to_json(obj))

raw_stderr <- function(msg) {
  try(writeBin(charToRaw(paste0("toolcell runner: ", msg, "\n")), ERR), silent = TRUE)
  try(flush(ERR), silent = TRUE)
}

# One request line from the relay; `character(0)` at EOF.
read_line <- function() {
  repeat {
    line <- tryCatch(READ_LINES(REQ, n = 1L, warn = FALSE, encoding = "UTF-8"),
                     interrupt = function(e) NA_character_)
    if (length(line) == 0L || !is.na(line)) return(line)
  }
}

# The host's execute line, `{"type":"execute","id":"<hex>","code":"…"}`,
# parsed without the general decoder; `NULL` when it has another shape (a
# `stubs` field, say): the general decoder takes it then.
EXEC_PREFIX <- "{\"type\":\"execute\",\"id\":\""
parse_execute <- function(line) {
  if (!startsWith(line, EXEC_PREFIX) || !endsWith(line, "\"}")) return(NULL)
  sep <- regexpr("\",\"code\":\"", line, fixed = TRUE)
  if (sep < 0L) return(NULL)
  id <- substr(line, nchar(EXEC_PREFIX) + 1L, sep - 1L)
  if (!grepl("^[0-9A-Za-z_-]+$", id)) return(NULL)
  raw <- substr(line, sep + 10L, nchar(line) - 2L)
  # Inside a JSON string every quote is escaped, so `","` there means the
  # string ended and another field follows: `stubs` is the one the host
  # sends (after `code`); anything else goes to the general decoder.
  stubs <- NULL
  k <- regexpr("\",\"stubs\":\"", raw, fixed = TRUE)
  if (k > 0L) {
    stubs <- substr(raw, k + 11L, nchar(raw))
    raw <- substr(raw, 1L, k - 1L)
    if (grepl("\",\"", stubs, fixed = TRUE)) return(NULL)
    stubs <- json_unescape(stubs)
  }
  if (grepl("\",\"", raw, fixed = TRUE)) return(NULL)
  list(type = "execute", id = id, code = json_unescape(raw), stubs = stubs)
}

read_request <- function() {
  repeat {
    if (length(state$pending)) {
      req <- state$pending[[1L]]
      state$pending <- state$pending[-1L]
      return(req)
    }
    line <- read_line()
    if (length(line) == 0L) die()
    # SIGINT between cells is ignored (a pending one is cleared here).
    tryCatch(Sys.sleep(0), interrupt = function(e) NULL)
    if (!nzchar(line)) next
    # A reply to a call a cell gave up on (interrupted): nobody waits for it.
    if (startsWith(line, "{\"type\":\"tool_reply\"")) next
    req <- parse_execute(line)
    if (is.null(req)) req <- tryCatch(from_json(line), error = function(e) NULL)
    if (!is.list(req)) { raw_stderr("request line is not a JSON object"); next }
    return(req)
  }
}

# The host is gone (EOF from the relay): kill our group at once.
die <- function() {
  tools::pskill(-Sys.getpid(), 9L)
  tools::pskill(Sys.getpid(), 9L)
  REAL_QUIT(save = "no", status = 137L, runLast = FALSE)
}

# Quits the process for good: the relay goes first (it would otherwise keep
# reading until the host closes the pipe).
finish <- function(status, runLast = FALSE) {
  if (!is.na(.relay_pid)) try(tools::pskill(.relay_pid, 9L), silent = TRUE)
  REAL_QUIT(save = "no", status = status, runLast = runLast)
}

# A tool call in-band: a `tool_call` frame on stdout, then request lines
# until the host's `tool_reply` with our id; anything else that comes
# meanwhile is kept for the main loop. Returns the reply object's JSON text
# (the stub module parses it).
inband_call <- function(tool, args_json) {
  state$call_seq <- state$call_seq + 1L
  id <- state$call_seq
  send_body(OUT, paste0("{\"type\":\"tool_call\",\"id\":", id, ",\"tool\":", json_str(tool),
                        ",\"args\":", args_json, "}"))
  prefix <- paste0("{\"type\":\"tool_reply\",\"id\":", id, ",\"reply\":")
  repeat {
    line <- READ_LINES(REQ, n = 1L, warn = FALSE, encoding = "UTF-8")
    if (length(line) == 0L) die()
    if (startsWith(line, prefix)) {
      return(substr(line, nchar(prefix) + 1L, nchar(line) - 1L))
    }
    if (startsWith(line, "{\"type\":\"tool_reply\"") || !nzchar(trimws(line))) next
    req <- tryCatch(from_json(line), error = function(e) NULL)
    if (is.list(req)) state$pending[[length(state$pending) + 1L]] <- req
  }
}

# ---------------------------------------------------------------------------
# The cells' world
# ---------------------------------------------------------------------------

STDIN_MESSAGE <- paste(
  "interactive input is not supported: a toolcell cell cannot read stdin",
  "(readline(), readLines(\"stdin\"), scan()). Pass the data in the code itself,",
  "or write it to a file and read the file.")
state <- new.env()
state$stdin_requested <- FALSE
state$count <- 0L
state$our_devices <- integer(0)
state$pending <- list()
state$jit <- JIT_OFF()
state$call_seq <- 0L

refuse_stdin <- function() {
  state$stdin_requested <- TRUE
  stop(structure(class = c("toolcell_stdin", "error", "condition"),
                 list(message = STDIN_MESSAGE, call = NULL)))
}

# ---- What a cell read (docs/result.md, "files": read) ----
# file() and gzfile() (behind readLines, read.csv, scan, readRDS, load,
# source...) note each regular file opened for reading while a cell runs:
# once each, in first-read order, 50 listed and the rest counted. Files
# under R's own home, its libraries and the kernel's directory are left out.
READ_LISTED <- 50L
READ_KNOWN <- 4096L
state$reads <- NULL

new_reads <- function() {
  r <- new.env()
  r$known <- new.env(hash = TRUE)
  r$n_known <- 0L
  r$listed <- character(0)
  r$more <- 0
  r
}

read_skip <- function() {
  if (is.null(state$read_skip)) {
    dirs <- c(R.home(), .libPaths(), if (!REMOTE) KDIR)
    state$read_skip <- paste0(normalizePath(dirs, mustWork = FALSE), "/")
  }
  state$read_skip
}

note_read <- function(description, open = "") {
  r <- state$reads
  if (is.null(r)) return(invisible(NULL))
  try(silent = TRUE, {
    if (is.character(description) && length(description) == 1L && nzchar(description) &&
        (!nzchar(open) || grepl("r|\\+", open)) &&
        !grepl("^[A-Za-z][A-Za-z0-9+.-]*://", description)) {
      full <- normalizePath(path.expand(description), mustWork = FALSE)
      if (!exists(full, envir = r$known, inherits = FALSE)) {
        if (r$n_known < READ_KNOWN) {
          assign(full, TRUE, envir = r$known)
          r$n_known <- r$n_known + 1L
        }
        if (!any(startsWith(full, read_skip())) && isTRUE(utils::file_test("-f", full)) &&
            !(full %in% r$listed)) {
          if (length(r$listed) < READ_LISTED) r$listed <- c(r$listed, full) else r$more <- r$more + 1
        }
      }
    }
  })
  invisible(NULL)
}

reads_json <- function(r) {
  if (is.null(r) || !length(r$listed)) return("")
  paste0(",\"read\":{\"paths\":[", paste(vapply(r$listed, json_str, ""), collapse = ","),
         "],\"total\":", sprintf("%.0f", length(r$listed) + r$more), "}")
}

is_stdin <- function(x) {
  (is.character(x) && length(x) == 1L && x %in% c("stdin", "/dev/stdin")) ||
    (inherits(x, "connection") && identical(summary(x)$description, "stdin"))
}

replace_base <- function(name, f, env = baseenv()) {
  locked <- bindingIsLocked(name, env)
  if (locked) unlockBinding(name, env)
  assign(name, f, envir = env)
  if (locked) lockBinding(name, env)
}

install_world <- function() {
  state$last_value <- tryCatch({
    if (bindingIsLocked(".Last.value", baseenv())) unlockBinding(".Last.value", baseenv())
    TRUE
  }, error = function(e) FALSE)
  real_readLines <- base::readLines
  real_scan <- base::scan
  real_file <- base::file
  replace_base("readline", function(prompt = "") refuse_stdin())
  replace_base("readLines", function(con = stdin(), ...) {
    if (is_stdin(con)) refuse_stdin()
    real_readLines(con, ...)
  })
  replace_base("scan", function(file = "", ...) {
    if (identical(file, "") || is_stdin(file)) refuse_stdin()
    real_scan(file, ...)
  })
  replace_base("file", function(description = "", open = "", ...) {
    if (identical(description, "stdin") && !grepl("w|a", open)) refuse_stdin()
    note_read(description, open)
    real_file(description, open, ...)
  })
  real_gzfile <- base::gzfile
  replace_base("gzfile", function(description, open = "", ...) {
    note_read(description, open)
    real_gzfile(description, open, ...)
  })
  # base's own functions (readLines, readRDS, load, source) and other
  # packages' (read.csv, scan) find file() and gzfile() in base's
  # namespace, not on the search path: the readers are noted there too.
  for (name in c("file", "gzfile")) {
    replace_base(name, get(name, envir = baseenv()), .BaseNamespaceEnv)
  }
  exit_fn <- function(save = "default", status = 0, runLast = TRUE) {
    stop(structure(class = c("toolcell_exit", "condition"),
                   list(message = "quit", call = NULL, status = as.integer(status))))
  }
  replace_base("quit", exit_fn)
  replace_base("q", exit_fn)
  # Figures: a plot with no device open draws on a PNG in the artifacts
  # directory; every page is its own file; saved when the cell ends.
  options(device = function(...) {
    dir.create(ARTIFACTS, showWarnings = FALSE, mode = "0700")
    file <- file.path(ARTIFACTS, sprintf("cell-%d-fig-%%d.png", state$count))
    if (capabilities("cairo")) {
      grDevices::png(file, width = 800, height = 600, res = 96, type = "cairo")
    } else {
      grDevices::png(file, width = 800, height = 600, res = 96)
    }
    state$our_devices <- c(state$our_devices, grDevices::dev.cur())
  }, warn = 1L, keep.source = FALSE)
}

load_stubs <- function(source) {
  env <- new.env(parent = globalenv())
  # The stub module's transport: tool calls travel in-band.
  assign(".toolcell_rpc", inband_call, envir = env)
  ok <- tryCatch({
    eval(parse(text = source, keep.source = FALSE, encoding = "UTF-8"), envir = env)
    TRUE
  }, error = function(e) {
    raw_stderr(paste("cannot load the tool functions:", conditionMessage(e)))
    FALSE
  })
  if (!ok) return(invisible())
  while ("toolcell:tools" %in% search()) detach("toolcell:tools", character.only = TRUE)
  attach(env, name = "toolcell:tools", warn.conflicts = FALSE)
}

# ---------------------------------------------------------------------------
# Running a cell
# ---------------------------------------------------------------------------

B64 <- strsplit("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", "")[[1]]

base64 <- function(bytes) {
  n <- length(bytes)
  if (!n) return("")
  pad <- (3L - n %% 3L) %% 3L
  v <- c(as.integer(bytes), integer(pad))
  m <- matrix(v, nrow = 3L)
  w <- m[1L, ] * 65536L + m[2L, ] * 256L + m[3L, ]
  idx <- rbind(w %/% 262144L, (w %/% 4096L) %% 64L, (w %/% 64L) %% 64L, w %% 64L)
  out <- B64[as.vector(idx) + 1L]
  if (pad) out[(length(out) - pad + 1L):length(out)] <- "="
  paste(out, collapse = "")
}

save_figures <- function(count) {
  devs <- intersect(state$our_devices, grDevices::dev.list())
  for (d in devs) try(grDevices::dev.off(d), silent = TRUE)
  state$our_devices <- integer(0)
  if (!dir.exists(ARTIFACTS)) return(list())
  pattern <- sprintf("^cell-%d-fig-([0-9]+)\\.png$", count)
  files <- list.files(ARTIFACTS, pattern = pattern)
  if (!length(files)) return(list())
  n <- as.integer(sub(pattern, "\\1", files))
  files <- files[order(n)]
  lapply(files, function(f) {
    p <- file.path(ARTIFACTS, f)
    if (!REMOTE) return(list(mime = "image/png", path = p))
    # A remote figure goes to the host in a frame; the host stores it.
    bytes <- readBin(p, "raw", file.size(p))
    unlink(p)
    send(OUT, list(type = "file", name = f, mime = "image/png", data = base64(bytes)))
    list(mime = "image/png", path = f)
  })
}

peak_rss_kb <- function() {
  s <- tryCatch(rawToChar(readBin("/proc/self/status", "raw", 8192L)), error = function(e) "")
  i <- regexpr("VmHWM:", s, fixed = TRUE)
  if (i < 0L) return(0)
  v <- suppressWarnings(as.numeric(strsplit(substr(s, i + 6L, i + 40L), "k", fixed = TRUE)[[1L]][[1L]]))
  if (is.na(v)) 0 else v
}

format_call <- function(call) {
  if (is.null(call)) return(NULL)
  paste(deparse(call, nlines = 1L, width.cutoff = 60L), collapse = "")
}

# The lines of the cell on the stack, outermost first.
cell_lines <- function(calls, filename) {
  out <- integer(0)
  for (cl in calls) {
    sr <- attr(cl, "srcref")
    if (!is.null(sr)) {
      sf <- attr(sr, "srcfile")
      if (!is.null(sf) && identical(sf$filename, filename)) out <- c(out, sr[[1L]])
    }
  }
  out
}

run_cell <- function(code, count) {
  filename <- sprintf("<cell-%d>", count)
  lines <- strsplit(code, "\n", fixed = TRUE)[[1]]
  line_text <- function(n) if (!is.na(n) && n >= 1L && n <= length(lines)) trimws(lines[[n]]) else ""
  out <- list(status = "ok", traceback = "", exit_code = NULL)
  srcfile <- srcfilecopy(filename, lines)
  exprs <- tryCatch(parse(text = lines, keep.source = TRUE, srcfile = srcfile, encoding = "UTF-8"),
                    error = function(e) e)
  if (inherits(exprs, "error")) {
    out$status <- "error"
    msg <- sub("^<text>", filename, conditionMessage(exprs))
    out$traceback <- paste0("Error: syntax error in ", msg, "\n")
    return(out)
  }
  srcrefs <- attr(exprs, "srcref")
  current_line <- NA_integer_
  failure <- NULL
  handler_error <- function(e) {
    if (inherits(e, "toolcell_exit")) return()
    calls <- sys.calls()
    # Drop the runner's own frames (down to the eval of the expression).
    n <- length(calls)
    keep <- integer(0)
    started <- FALSE
    for (i in seq_len(n)) {
      f <- calls[[i]][[1L]]
      if (!started) {
        if (identical(f, quote(eval)) && i > 1L && identical(calls[[i - 1L]][[1L]], quote(withVisible))) started <- TRUE
        next
      }
      keep <- c(keep, i)
    }
    user <- calls[keep]
    # conditionCall and the handler frames are not the user's.
    user <- Filter(function(cl) {
      f <- cl[[1L]]
      !(is.name(f) && as.character(f) %in% c("stop", "stopifnot", ".handleSimpleError", "h", "doTryCatch",
                                              "tryCatchList", "tryCatchOne", "withCallingHandlers", "signalCondition"))
    }, user)
    names <- vapply(user, function(cl) {
      f <- cl[[1L]]
      if (is.name(f)) as.character(f) else ""
    }, "")
    failure <<- list(
      lines = unique(c(current_line, cell_lines(calls, filename))),
      calls = names[nzchar(names) & names != "eval"]
    )
  }
  handler_warning <- function(w) {
    call <- format_call(conditionCall(w))
    msg <- conditionMessage(w)
    text <- if (is.null(call)) paste0("Warning: ", msg) else paste0("Warning in ", call, " : ", msg)
    cat(text, "\n", sep = "", file = stderr())
    invokeRestart("muffleWarning")
  }
  if (state$jit > 0L) .Internal(enableJIT(state$jit))
  result <- tryCatch({
    withCallingHandlers({
      for (i in seq_along(exprs)) {
        current_line <- srcrefs[[i]][[1L]]
        vis <- withVisible(eval(exprs[[i]], envir = globalenv()))
        if (vis$visible) {
          if (isS4(vis$value)) methods::show(vis$value) else print(vis$value)
        }
        # `.Last.value` as at the console (its binding unlocked at start; a
        # failing assign here would reach the cell's error handler).
        if (state$last_value) assign(".Last.value", vis$value, envir = baseenv())
      }
      NULL
    }, error = handler_error, warning = handler_warning)
  },
  toolcell_exit = function(e) e,
  interrupt = function(e) structure(list(), class = "toolcell_interrupted"),
  error = function(e) e)
  # The level the cell left (it may have called compiler::enableJIT itself).
  state$jit <- JIT_OFF()
  if (inherits(result, "toolcell_exit")) {
    out$status <- "exit"
    out$exit_code <- result$status
  } else if (inherits(result, "toolcell_interrupted")) {
    out$status <- "interrupted"
    out$traceback <- sprintf("Interrupted: the cell was stopped (SIGINT) at line %s of %s; the kernel and its state are kept\n",
                             current_line, filename)
  } else if (inherits(result, "error")) {
    out$status <- "error"
    call <- format_call(conditionCall(result))
    msg <- conditionMessage(result)
    text <- if (is.null(call)) paste0("Error: ", msg) else paste0("Error in ", call, " : ", msg)
    at_lines <- if (!is.null(failure)) failure$lines else current_line
    at_lines <- at_lines[!is.na(at_lines)]
    calls <- if (!is.null(failure)) failure$calls else character(0)
    where <- vapply(at_lines, function(n) sprintf("  at %s line %d: %s\n", filename, n, line_text(n)), "")
    if (inherits(result, "ToolError") && !is.null(result$code)) text <- paste0(text, " [ToolError code: ", result$code, "]")
    out$traceback <- paste0(
      paste(where, collapse = ""),
      if (length(calls) > 1L) paste0("Calls: ", paste(calls, collapse = " -> "), "\n") else "",
      text, "\n")
  }
  out
}

handle_execute <- function(req) {
  rid <- req$id
  if (!is.character(rid)) { raw_stderr("execute request without a string id ignored"); return() }
  state$count <- state$count + 1L
  count <- state$count
  t0 <- proc.time()
  state$stdin_requested <- FALSE
  state$reads <- new_reads()
  res <- tryCatch({
    if (is.character(req$stubs)) load_stubs(req$stubs)
    if (!is.character(req$code)) stop("execute request: code must be a string")
    run_cell(req$code, count)
  }, error = function(e) list(status = "error",
                              traceback = paste0("toolcell runner: internal error (the kernel is still usable): ", conditionMessage(e), "\n")),
  interrupt = function(e) list(status = "interrupted", traceback = "Interrupted\n"))
  # The cell's reads end here: what the runner reads next is its own.
  reads <- state$reads
  state$reads <- NULL
  # Only our own devices draw into the artifacts directory.
  display <- if (length(state$our_devices)) tryCatch(save_figures(count), error = function(e) list()) else list()
  t1 <- proc.time()
  d <- t1 - t0
  cpu <- sum(d[c(1L, 2L, 4L, 5L)], na.rm = TRUE)
  # Written by hand: the general encoder costs more than the cell.
  result <- paste0(
    "{\"type\":\"result\",\"id\":", json_str(rid), ",\"status\":", json_str(res$status),
    if (!is.null(res$exit_code)) paste0(",\"exit_code\":", as.integer(res$exit_code)) else "",
    ",\"traceback\":", json_str(res$traceback), ",\"execution_count\":", count,
    ",\"stdin_requested\":", if (isTRUE(state$stdin_requested)) "true" else "false",
    ",\"usage\":{\"cpu_seconds\":", sprintf("%.6f", max(0, cpu)),
    ",\"peak_rss_kb\":", sprintf("%.0f", peak_rss_kb()),
    ",\"wall_seconds\":", sprintf("%.6f", max(0, d[[3L]])), "}",
    ",\"display\":", if (length(display)) to_json(display) else "[]",
    reads_json(reads), "}")
  flush(stdout())
  flush(stderr())
  send_body(ERR, paste0("{\"type\":\"end\",\"id\":", json_str(rid), "}"))
  send_body(OUT, result)
  if (identical(res$status, "exit")) {
    finish(res$exit_code %% 256L, runLast = TRUE)
  }
}

main <- function() {
  hello <- read_request()
  if (!identical(hello$type, "hello")) { raw_stderr("the first request must be hello"); finish(2L) }
  if (!identical(as.integer(hello$protocol), PROTOCOL)) { raw_stderr("unsupported protocol"); finish(2L) }
  s <- hello$sentinel
  if (!is.character(s) || !grepl("^[!-~]+$", s)) { raw_stderr("bad sentinel"); finish(2L) }
  MARK <<- paste0("\n", s, " ")
  if (is.character(hello$cwd) && nzchar(hello$cwd)) {
    ok <- tryCatch({ setwd(hello$cwd); TRUE }, error = function(e) FALSE)
    if (!ok) { raw_stderr(paste("cannot change to the working directory", hello$cwd)); finish(2L) }
  }
  install_world()
  load_stubs(.stubs)
  v <- R.version
  send(OUT, list(type = "ready", protocol = PROTOCOL, pid = Sys.getpid(),
                 python = paste(v$major, v$minor, sep = "."),
                 executable = file.path(R.home("bin"), "R")))
  repeat {
    req <- read_request()
    tryCatch({
      type <- req$type
      if (identical(type, "execute")) handle_execute(req)
      else if (identical(type, "shutdown")) finish(0L)
      else raw_stderr(paste("unknown request type ignored:", format(type)))
    }, error = function(e) raw_stderr(paste("internal error in the main loop:", conditionMessage(e))),
    interrupt = function(e) NULL)
  }
}

main()
