# toolcell kernel runner for R (Rscript, R 4.x; base R only, jsonlite for tools).
#
# Same protocol as runner.py (see README.md beside this file): JSON request
# lines on fd 3; frames "\n" SENTINEL " " <length> "\n" <JSON> on private
# descriptors of the stdout and stderr pipes. Cells run in the global
# environment; this code lives in a private environment (parent: base).

PROTOCOL <- 1L
REAL_QUIT <- base::quit
KDIR <- dirname(.runner_path)
ARTIFACTS <- file.path(KDIR, "artifacts")

# ---------------------------------------------------------------------------
# JSON: a small encoder and a tokenizer-based decoder (loading jsonlite
# would double the start time; the tools use it, lazily).
# ---------------------------------------------------------------------------

json_str <- function(s) {
  s <- enc2utf8(as.character(s))
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

REQ <- suppressWarnings(file("/dev/fd/3", open = "r", raw = TRUE, encoding = "UTF-8"))
OUT <- file("/proc/self/fd/1", open = "wb", raw = TRUE)
ERR <- file("/proc/self/fd/2", open = "wb", raw = TRUE)
MARK <- NULL

send <- function(con, obj) {
  body <- charToRaw(enc2utf8(to_json(obj)))
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

raw_stderr <- function(msg) {
  try(writeBin(charToRaw(paste0("toolcell runner: ", msg, "\n")), ERR), silent = TRUE)
  try(flush(ERR), silent = TRUE)
}

read_request <- function() {
  repeat {
    line <- tryCatch(readLines(REQ, n = 1L, warn = FALSE, encoding = "UTF-8"),
                     interrupt = function(e) NA_character_)
    if (length(line) == 0L) die()
    # SIGINT between cells is ignored (a pending one is cleared here).
    tryCatch(Sys.sleep(0), interrupt = function(e) NULL)
    if (is.na(line) || !nzchar(trimws(line))) next
    req <- tryCatch(from_json(line), error = function(e) NULL)
    if (!is.list(req)) { raw_stderr("request line is not a JSON object"); next }
    return(req)
  }
}

die <- function() {
  tools::pskill(-Sys.getpid(), 9L)
  tools::pskill(Sys.getpid(), 9L)
  REAL_QUIT(save = "no", status = 137L, runLast = FALSE)
}

# The host is gone when its process is: a watcher polls it (R has no thread
# to read the request pipe during a busy cell) and kills our group.
start_watcher <- function() {
  stat <- readLines("/proc/self/stat", warn = FALSE)
  fields <- strsplit(sub("^.*\\) ", "", stat), " ")[[1]]
  host <- as.integer(fields[[2]])
  me <- Sys.getpid()
  script <- sprintf(
    "trap '' INT; i=3; while [ $i -lt 64 ]; do eval \"exec $i>&-\" 2>/dev/null; i=$((i+1)); done; while kill -0 %d 2>/dev/null && kill -0 %d 2>/dev/null; do sleep 0.25; done; kill -0 %d 2>/dev/null && kill -9 -- -%d 2>/dev/null",
    host, me, me, me)
  system2("/bin/sh", c("-c", shQuote(script)), wait = FALSE, stdout = FALSE, stderr = FALSE)
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

refuse_stdin <- function() {
  state$stdin_requested <- TRUE
  stop(structure(class = c("toolcell_stdin", "error", "condition"),
                 list(message = STDIN_MESSAGE, call = NULL)))
}

is_stdin <- function(x) {
  (is.character(x) && length(x) == 1L && x %in% c("stdin", "/dev/stdin")) ||
    (inherits(x, "connection") && identical(summary(x)$description, "stdin"))
}

replace_base <- function(name, f) {
  env <- baseenv()
  locked <- bindingIsLocked(name, env)
  if (locked) unlockBinding(name, env)
  assign(name, f, envir = env)
  if (locked) lockBinding(name, env)
}

install_world <- function() {
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
    real_file(description, open, ...)
  })
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

load_stubs <- function(source, path) {
  env <- new.env(parent = globalenv())
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
  lapply(file.path(ARTIFACTS, files), function(p) list(mime = "image/png", path = p))
}

peak_rss_kb <- function() {
  s <- tryCatch(readLines("/proc/self/status", warn = FALSE), error = function(e) character(0))
  line <- grep("^VmHWM:", s, value = TRUE)
  if (!length(line)) return(0)
  as.numeric(gsub("[^0-9]", "", line))
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
  result <- tryCatch({
    withCallingHandlers({
      for (i in seq_along(exprs)) {
        current_line <- srcrefs[[i]][[1L]]
        vis <- withVisible(eval(exprs[[i]], envir = globalenv()))
        if (vis$visible) {
          if (isS4(vis$value)) methods::show(vis$value) else print(vis$value)
        }
        # `.Last.value` as at the console.
        try(assign(".Last.value", vis$value, envir = baseenv()), silent = TRUE)
      }
      NULL
    }, error = handler_error, warning = handler_warning)
  },
  toolcell_exit = function(e) e,
  interrupt = function(e) structure(list(), class = "toolcell_interrupted"),
  error = function(e) e)
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
  res <- tryCatch({
    if (is.character(req$stubs)) load_stubs(req$stubs, file.path(KDIR, "toolcell_tools.R"))
    if (!is.character(req$code)) stop("execute request: code must be a string")
    run_cell(req$code, count)
  }, error = function(e) list(status = "error",
                              traceback = paste0("toolcell runner: internal error (the kernel is still usable): ", conditionMessage(e), "\n")),
  interrupt = function(e) list(status = "interrupted", traceback = "Interrupted\n"))
  display <- tryCatch(save_figures(count), error = function(e) list())
  t1 <- proc.time()
  d <- t1 - t0
  cpu <- sum(d[c(1L, 2L, 4L, 5L)], na.rm = TRUE)
  result <- list(type = "result", id = rid, status = res$status)
  if (!is.null(res$exit_code)) result$exit_code <- res$exit_code
  result$traceback <- res$traceback
  result$execution_count <- count
  result$stdin_requested <- state$stdin_requested
  result$usage <- list(cpu_seconds = round(cpu, 6), peak_rss_kb = peak_rss_kb(),
                       wall_seconds = round(d[[3L]], 6))
  result$display <- display
  flush(stdout())
  flush(stderr())
  send(ERR, list(type = "end", id = rid))
  send(OUT, result)
  if (identical(res$status, "exit")) {
    REAL_QUIT(save = "no", status = res$exit_code %% 256L, runLast = TRUE)
  }
}

main <- function() {
  hello <- read_request()
  if (!identical(hello$type, "hello")) { raw_stderr("the first request must be hello"); REAL_QUIT(save = "no", status = 2L) }
  if (!identical(as.integer(hello$protocol), PROTOCOL)) { raw_stderr("unsupported protocol"); REAL_QUIT(save = "no", status = 2L) }
  s <- hello$sentinel
  if (!is.character(s) || !grepl("^[!-~]+$", s)) { raw_stderr("bad sentinel"); REAL_QUIT(save = "no", status = 2L) }
  MARK <<- paste0("\n", s, " ")
  install_world()
  stub_path <- file.path(KDIR, "toolcell_tools.R")
  if (file.exists(stub_path)) load_stubs(paste(readLines(stub_path, warn = FALSE, encoding = "UTF-8"), collapse = "\n"), stub_path)
  v <- R.version
  send(OUT, list(type = "ready", protocol = PROTOCOL, pid = Sys.getpid(),
                 python = paste(v$major, v$minor, sep = "."),
                 executable = file.path(R.home("bin"), "R")))
  start_watcher()
  repeat {
    req <- read_request()
    tryCatch({
      type <- req$type
      if (identical(type, "execute")) handle_execute(req)
      else if (identical(type, "shutdown")) REAL_QUIT(save = "no", status = 0L)
      else raw_stderr(paste("unknown request type ignored:", format(type)))
    }, error = function(e) raw_stderr(paste("internal error in the main loop:", conditionMessage(e))),
    interrupt = function(e) NULL)
  }
}

main()
