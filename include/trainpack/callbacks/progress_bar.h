// ProgressBar: a tqdm-style bar per epoch on stderr (tensorpack's callbacks/steps.py), and the
// tqdm formatting helpers it is drawn with.
// See docs/monitors.md, "ProgressBar".
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/callback.h"
#include "trainpack/utils/clock.h"

namespace trainpack {

struct ProgressBarOptions {
  using File = std::FILE*;  // (TORCH_ARG spells `const T&`, which needs a single-name type)

  // Tensors the step publishes, shown as `tag=value` after the rate.
  TORCH_ARG(std::vector<std::string>, names);
  // Where the bar is written (default stderr). Not used when `sink` is set.
  TORCH_ARG(File, stream) = stderr;
  // Receives the output instead of `stream` (each call: one draw, with its '\r' or '\n').
  TORCH_ARG(std::function<void(std::string_view)>, sink);
  // Whether to draw as on a terminal; unset: whether `stream` is a terminal (false with a sink).
  TORCH_ARG(std::optional<bool>, force_terminal);
  // Seconds between draws; unset: TRAINPACK_PROGRESS_REFRESH, else the defaults (see
  // default_progress_refresh_interval).
  TORCH_ARG(std::optional<double>, refresh_interval);
  // true: `#` and digits; false: unicode blocks; unset: unicode on a UTF-8 terminal only.
  TORCH_ARG(std::optional<bool>, ascii);
  // Width of the whole line (the bar takes what the text leaves); 0: the terminal's width when
  // `stream` is a terminal, else a bar of 10 characters.
  TORCH_ARG(int, ncols) = 0;
  // Seconds since any fixed point; unset: a steady clock. For tests.
  TORCH_ARG(Clock, clock);
};

// tensorpack's ProgressBar: tqdm's default line per epoch, on stderr: percentage, bar, steps done /
// steps per epoch, [elapsed < remaining, rate] (tqdm's smoothed rate; the epoch's average on the
// line drawn at its end), then `tag=value` for each of `names` (tensors the step publishes; the
// tag is the part after the last '/'; tqdm's format_num).
// When: before_train reads steps_per_epoch and picks the refresh interval; before_epoch starts a
// bar; trigger_step advances it and redraws it when the interval has passed; after_epoch draws it
// a last time and ends the line; after_train closes a bar still open. No bar with zero steps per
// epoch. On a terminal it redraws in place (`\r`, with a 0% draw at the start) to the terminal's
// width, with unicode blocks under a UTF-8 locale; elsewhere it prints whole `#` lines, at most
// one per interval plus one at every epoch end.
// Cost: the named tensors are fetched (and read with .item()) only for the steps after which the
// bar is drawn, and an epoch's last step; a step that draws nothing allocates nothing.
// chief_only: false (tensorpack's); under data-parallel training only the chief draws.
// Errors: std::invalid_argument (naming the tensor) when a named tensor has more than one element.
class ProgressBar : public Callback {
 public:
  explicit ProgressBar(std::vector<std::string> names = {});
  explicit ProgressBar(ProgressBarOptions options);

  // The seconds between draws in effect (known from before_train on).
  double refresh_interval() const { return interval_; }
  // Whether the bar draws as on a terminal (known from before_train on).
  bool terminal() const { return terminal_; }

 protected:
  void _before_train() override;
  void _before_epoch() override;
  RunArgs _before_run(const StepContext& ctx) override;
  void _after_run(const StepContext& ctx, const RunValues& values) override;
  void _trigger_step() override;
  void _after_epoch() override;
  void _after_train() override;

 private:
  // tqdm's exponential moving average (bias-corrected).
  struct Ema {
    double last = 0;
    int calls = 0;
    void add(double x);
    double value() const;
  };

  double now() const;
  bool time_due(double t) const { return t - last_print_t_ >= interval_; }
  void draw(double t, bool final);
  void write(std::string_view text);
  void close();
  int line_width() const;

  ProgressBarOptions options_;
  std::vector<std::string> tags_;
  RunArgs fetch_;  // the names, requested by reference on the steps that draw

  bool terminal_ = false;
  bool ascii_ = true;
  double interval_ = 0;
  int64_t total_ = 0;

  bool open_ = false;
  int64_t n_ = 0;
  double start_t_ = 0;
  double last_print_t_ = 0;
  int64_t last_print_n_ = 0;
  Ema ema_dn_, ema_dt_;
  size_t last_len_ = 0;  // display width of the last terminal draw (padding for the next)
  std::string postfix_;
  std::string line_;

  int64_t last_updated_ = -1;  // local_step of the last step whose first hooked run was seen
  bool decided_ = false;       // this step's first hooked run decided draw_due_
  bool draw_due_ = false;      // draw after this step
};

// The refresh interval when none is given (tensorpack's get_tqdm_kwargs rule):
// TRAINPACK_PROGRESS_REFRESH if it holds a non-negative number; else 0.5 s on a terminal; else,
// with SLURM_JOB_ID set, 60 s if SLURM_JOB_NUM_NODES > 1 and 15 s otherwise; else 60 s with
// OMPI_COMM_WORLD_SIZE set; else 180 s. A TRAINPACK_PROGRESS_REFRESH that is not a non-negative
// number logs a warning.
double default_progress_refresh_interval(bool terminal);

// Whether the locale named by LC_ALL, LC_CTYPE or LANG (the first one set) uses UTF-8.
bool locale_is_utf8();

// tqdm's formatting, as tqdm 4.x prints its default bar.
namespace tqdm {

// `[H:]MM:SS` of the whole seconds: 0 -> "00:00", 75.9 -> "01:15", 3725 -> "1:02:05".
std::string format_interval(double seconds);

// tqdm's format_num: `{:.3g}` with the exponent's leading zero dropped (`1e-5`), unless Python's
// str() of the value is not longer: 0.3123 -> "0.312", 1.0 -> "1", 0.5 -> "0.5", 1e-05 -> "1e-5",
// 1234.0 -> "1234.0", 12345.0 -> "12345.0".
std::string format_num(double value);
std::string format_num(int64_t value);

// The rate: `{:5.2f}it/s` (" 4.40it/s", "130.52it/s"), `{:5.2f}s/it` when a step takes more than a
// second (" 2.50s/it"), "?it/s" when unknown (NaN or not positive).
std::string format_rate(double steps_per_sec);

// Number of characters a terminal shows for `text` (UTF-8 code points).
size_t display_width(std::string_view text);

// One line of the bar (tqdm's format_meter with its default bar format):
// ` 45%|####5     | 45/100 [00:10<00:12,  4.40it/s, cost=0.123]`.
// `rate` NaN means unknown (then n / elapsed, if elapsed > 0). `postfix` is appended after ", ".
// `ncols` > 0: the bar takes the width the rest leaves (at least 1) and the line is cut at
// `ncols`; 0: a bar of 10. With `total` 0 (or n > total): `{n}it [{elapsed}, {rate}{postfix}]`.
std::string format_meter(int64_t n, int64_t total, double elapsed, double rate,
                         std::string_view postfix, bool ascii, int ncols = 0);

}  // namespace tqdm
}  // namespace trainpack
