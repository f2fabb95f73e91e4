// Python's `repr(float)`: the shortest text that reads back as the same double, laid out the way
// Python prints it. Used where tensorpack lets Python turn a float into text: the values that
// SendStat / SendMonitorData put into a command, and tqdm's `format_num` in the progress bar.
#pragma once

#include <string>

namespace trainpack {

// `0.1` -> "0.1", `1.0` -> "1.0", `1e-05` -> "1e-05", `1e16` -> "1e+16", `-0.0` -> "-0.0",
// infinities -> "inf" / "-inf", NaN -> "nan": positional when the decimal exponent is in
// [-4, 16), scientific otherwise, as Python's float_repr does.
std::string python_float_repr(double value);
// The same text, appended to `out` (no allocation beyond out's growth).
void append_python_float_repr(std::string& out, double value);

}  // namespace trainpack
