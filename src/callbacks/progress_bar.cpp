#include "trainpack/callbacks/progress_bar.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "trainpack/core/trainer.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/host_read.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/process_io.h"

namespace trainpack {
namespace {

constexpr double kUnknownRate = std::numeric_limits<double>::quiet_NaN();

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// A whole string that strtod reads as a number (surrounding spaces allowed, as Python's float()).
std::optional<double> parse_double(const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text) return std::nullopt;
  while (*end && std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (*end) return std::nullopt;
  return v;
}

std::string tag_of(const std::string& name) {
  const size_t slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

}  // namespace

// ---- tqdm formatting ----

namespace tqdm {

std::string format_interval(double seconds) {
  const int64_t whole = seconds > 0 ? static_cast<int64_t>(seconds) : 0;
  const int64_t mins = whole / 60, s = whole % 60;
  const int64_t h = mins / 60, m = mins % 60;
  if (h) return fmt::format("{:d}:{:02d}:{:02d}", h, m, s);
  return fmt::format("{:02d}:{:02d}", m, s);
}

namespace {
// Python's `"{:.3g}".format(v).replace("+0", "+").replace("-0", "-")`.
std::string short_g(double value) {
  std::string f;
  if (std::isnan(value)) {
    f = "nan";
  } else if (std::isinf(value)) {
    f = value > 0 ? "inf" : "-inf";
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", value);
    f = buf;
  }
  for (const char* from : {"+0", "-0"}) {
    for (size_t pos = f.find(from); pos != std::string::npos; pos = f.find(from, pos + 1)) {
      f.erase(pos + 1, 1);
    }
  }
  return f;
}
}  // namespace

std::string format_num(double value) {
  std::string f = short_g(value);
  std::string n = python_float_repr(value);
  return f.size() < n.size() ? f : n;
}

std::string format_num(int64_t value) {
  std::string f = short_g(static_cast<double>(value));
  std::string n = std::to_string(value);
  return f.size() < n.size() ? f : n;
}

std::string format_rate(double rate) {
  if (!(rate > 0)) return "?it/s";
  const double inv = 1 / rate;
  if (inv > 1) return fmt::format("{:5.2f}s/it", inv);
  return fmt::format("{:5.2f}it/s", rate);
}

size_t display_width(std::string_view text) {
  size_t n = 0;
  for (char c : text) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;  // not a continuation byte
  }
  return n;
}

namespace {
// The first `width` code points of `text`.
void trim_to_width(std::string& text, size_t width) {
  size_t points = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80 && points++ == width) {
      text.resize(i);
      return;
    }
  }
}

void append_bar(std::string& out, double frac, int64_t width, bool ascii) {
  // tqdm's Bar: full cells, one partial cell in 1/nsyms steps, then blanks.
  static const char* const kAscii[] = {" ", "1", "2", "3", "4", "5", "6", "7", "8", "9", "#"};
  static const char* const kUnicode[] = {" ",      "\u258f", "\u258e", "\u258d", "\u258c",
                                         "\u258b", "\u258a", "\u2589", "\u2588"};
  const char* const* charset = ascii ? kAscii : kUnicode;
  const int64_t nsyms = ascii ? 10 : 8;
  frac = std::clamp(frac, 0.0, 1.0);
  const auto cells = static_cast<int64_t>(frac * static_cast<double>(width) * nsyms);
  const int64_t full = cells / nsyms, part = cells % nsyms;
  for (int64_t i = 0; i < full; ++i) out += charset[nsyms];
  if (full < width) {
    out += charset[part];
    for (int64_t i = full + 1; i < width; ++i) out += charset[0];
  }
}
}  // namespace

std::string format_meter(int64_t n, int64_t total, double elapsed, double rate,
                         std::string_view postfix, bool ascii, int ncols) {
  if (total > 0 && static_cast<double>(n) >= static_cast<double>(total) + 0.5) total = 0;
  const std::string elapsed_str = format_interval(elapsed);
  if (std::isnan(rate) && elapsed > 0) rate = static_cast<double>(n) / elapsed;
  const std::string rate_fmt = format_rate(rate);
  const std::string post = postfix.empty() ? std::string() : ", " + std::string(postfix);
  if (total <= 0) return fmt::format("{}it [{}, {}{}]", n, elapsed_str, rate_fmt, post);

  const bool known = rate > 0;
  const std::string remaining =
      known ? format_interval(static_cast<double>(total - n) / rate) : std::string("?");
  const double frac = static_cast<double>(n) / static_cast<double>(total);
  const std::string l_bar = fmt::format("{:3.0f}%|", frac * 100);
  const std::string r_bar =
      fmt::format("| {}/{} [{}<{}, {}{}]", n, total, elapsed_str, remaining, rate_fmt, post);
  int64_t width = 10;
  if (ncols > 0) {
    width = std::max<int64_t>(
        1, static_cast<int64_t>(ncols) - static_cast<int64_t>(display_width(l_bar + r_bar)));
  }
  std::string out = l_bar;
  append_bar(out, frac, width, ascii);
  out += r_bar;
  if (ncols > 0) trim_to_width(out, static_cast<size_t>(ncols));
  return out;
}

}  // namespace tqdm

// ---- defaults ----

bool locale_is_utf8() {
  const char* value = nullptr;
  for (const char* name : {"LC_ALL", "LC_CTYPE", "LANG"}) {
    if ((value = env(name))) break;
  }
  if (!value) return false;
  std::string lower;
  for (const char* p = value; *p; ++p) {
    if (*p != '-') lower += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  }
  return lower.find("utf8") != std::string::npos;
}

double default_progress_refresh_interval(bool terminal) {
  // tensorpack's _pick_tqdm_interval.
  double fallback = 180;
  if (terminal) {
    fallback = 0.5;
  } else if (env("SLURM_JOB_ID")) {
    // When run under SLURM stderr is never a terminal; a single-node job may be interactive.
    const char* nodes = env("SLURM_JOB_NUM_NODES");
    const auto n = nodes ? parse_double(nodes) : std::nullopt;
    fallback = n && *n > 1 ? 60 : 15;
  } else if (env("OMPI_COMM_WORLD_SIZE")) {
    fallback = 60;
  }
  const char* text = std::getenv("TRAINPACK_PROGRESS_REFRESH");
  if (!text) return fallback;
  const auto v = parse_double(text);
  if (!v || !(*v >= 0)) {
    TP_LOG_WARN(
        "TRAINPACK_PROGRESS_REFRESH='{}' is not a non-negative number of seconds; the progress "
        "bar refreshes every {} s instead.",
        text, fallback);
    return fallback;
  }
  return *v;
}

// ---- ProgressBar ----

void ProgressBar::Ema::add(double x) {
  // tqdm's EMA with smoothing 0.5.
  constexpr double kAlpha = 0.5;
  last = kAlpha * x + (1 - kAlpha) * last;
  ++calls;
}

double ProgressBar::Ema::value() const { return calls ? last / (1 - std::pow(0.5, calls)) : last; }

ProgressBar::ProgressBar(std::vector<std::string> names)
    : ProgressBar(ProgressBarOptions().names(std::move(names))) {}

ProgressBar::ProgressBar(ProgressBarOptions options) : options_(std::move(options)) {
  set_chief_only(false);
  for (const auto& name : options_.names()) {
    if (name.empty()) throw std::invalid_argument("ProgressBar: a name in names is empty");
    tags_.push_back(tag_of(name));
  }
  fetch_ = RunArgs(options_.names());
  if (options_.refresh_interval() && !(*options_.refresh_interval() >= 0)) {
    throw std::invalid_argument(fmt::format(
        "ProgressBar: refresh_interval must be a non-negative number of seconds, got {}",
        *options_.refresh_interval()));
  }
  if (options_.ncols() < 0) {
    throw std::invalid_argument(
        fmt::format("ProgressBar: ncols must be 0 (auto) or positive, got {}", options_.ncols()));
  }
  if (!options_.sink() && !options_.stream()) {
    throw std::invalid_argument("ProgressBar: stream is null and no sink is given");
  }
}

double ProgressBar::now() const { return read_clock(options_.clock(), monotonic_seconds); }

void ProgressBar::_before_train() {
  if (options_.force_terminal()) {
    terminal_ = *options_.force_terminal();
  } else {
    terminal_ = !options_.sink() && isatty(fileno(options_.stream()));
  }
  ascii_ = options_.ascii() ? *options_.ascii() : !(terminal_ && locale_is_utf8());
  interval_ = options_.refresh_interval() ? *options_.refresh_interval()
                                          : default_progress_refresh_interval(terminal_);
  // Under data-parallel training the ranks run in step: the chief's bar tells their progress, and
  // the others draw none (total_ 0 opens no bar).
  total_ = trainer().world_size() > 1 && !trainer().is_chief() ? 0 : trainer().steps_per_epoch();
  last_updated_ = local_step();
}

void ProgressBar::_before_epoch() {
  close();
  last_updated_ = local_step();  // -1 (docs/tensorpack-differences.md #1): the first step of every
                                 // epoch fetches
  decided_ = draw_due_ = false;
  if (total_ <= 0) return;
  open_ = true;
  n_ = 0;
  last_print_n_ = 0;
  start_t_ = last_print_t_ = now();
  ema_dn_ = Ema();
  ema_dt_ = Ema();
  last_len_ = 0;
  postfix_.clear();
  if (terminal_) draw(start_t_, /*final=*/false);
}

RunArgs ProgressBar::_before_run(const StepContext& /*ctx*/) {
  const int64_t step = local_step();
  if (!open_ || step == last_updated_) return RunArgs();  // only a step's first hooked run
  last_updated_ = step;
  decided_ = true;
  const bool last_step = n_ + 1 >= total_;  // its values are shown in the epoch's last line
  draw_due_ = !last_step && time_due(now());
  if ((draw_due_ || last_step) && !tags_.empty()) return RunArgs::ref(fetch_);
  return RunArgs();
}

void ProgressBar::_after_run(const StepContext& /*ctx*/, const RunValues& values) {
  if (values.empty()) return;
  postfix_.clear();
  for (size_t i = 0; i < values.size(); ++i) {
    const at::Tensor& t = values[i];
    if (t.numel() != 1) {
      throw std::invalid_argument(
          fmt::format("ProgressBar can only print scalars, not '{}' of shape {}", values.name(i),
                      fmt::join(t.sizes(), "x")));
    }
    if (i) postfix_ += ", ";
    postfix_ += tags_[i];
    postfix_ += '=';
    if (at::isIntegralType(t.scalar_type(), /*includeBool=*/true)) {
      postfix_ += tqdm::format_num(host_scalar<int64_t>(t));
    } else {
      postfix_ += tqdm::format_num(host_scalar(t));
    }
  }
}

void ProgressBar::_trigger_step() {
  if (!open_) return;
  ++n_;
  if (n_ < total_) {  // the last step is drawn by after_epoch
    if (draw_due_) {
      draw(now(), /*final=*/false);
    } else if (!decided_) {  // a step without a hooked run: decide by the time alone
      const double t = now();
      if (time_due(t)) draw(t, /*final=*/false);
    }
  }
  decided_ = draw_due_ = false;
}

void ProgressBar::_after_epoch() { close(); }
void ProgressBar::_after_train() { close(); }

void ProgressBar::close() {
  if (!open_) return;
  draw(now(), /*final=*/true);
  open_ = false;
}

int ProgressBar::line_width() const {
  if (options_.ncols() > 0) return options_.ncols();
  if (!terminal_ || options_.sink()) return 0;
  winsize ws{};
  if (ioctl(fileno(options_.stream()), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

void ProgressBar::draw(double t, bool final) {
  double rate = kUnknownRate;  // the final line shows the average rate (tqdm's close())
  if (!final) {
    const double dt = t - last_print_t_;
    const int64_t dn = n_ - last_print_n_;
    if (dt > 0 && dn > 0) {
      ema_dn_.add(static_cast<double>(dn));
      ema_dt_.add(dt);
    }
    if (ema_dt_.value() > 0) rate = ema_dn_.value() / ema_dt_.value();
  }
  line_ = tqdm::format_meter(n_, total_, t - start_t_, rate, postfix_, ascii_, line_width());
  if (terminal_) {
    // Redraw in place; blanks cover what is left of a longer previous line.
    const size_t len = tqdm::display_width(line_);
    line_.insert(0, 1, '\r');
    if (last_len_ > len) line_.append(last_len_ - len, ' ');
    last_len_ = len;
    if (final) line_ += '\n';
  } else {
    line_ += '\n';
  }
  write(line_);
  last_print_t_ = t;
  last_print_n_ = n_;
}

void ProgressBar::write(std::string_view text) {
  if (options_.sink()) {
    options_.sink()(text);
    return;
  }
  write_console(options_.stream(), text);  // a stop does not wait for a reader of the stream
}

}  // namespace trainpack
