// libFuzzer target for the schedule text form (schedules/text_form.hpp), what
// `tandem simulate --order` reads: any bytes either parse or raise ScheduleError. A list that
// parses and validates must print (format_actions) to text that parses back to the same list,
// the round trip `--print-order` / `--order` relies on.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "schedules/schedule_error.hpp"
#include "schedules/text_form.hpp"
#include "schedules/validator.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ts = tandem::schedules;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ts::ActionList list;
  try {
    list = ts::parse_actions(text);
    ts::validate(list);
  } catch (const ts::ScheduleError&) {
    return 0;
  }
  const ts::ActionList again = ts::parse_actions(ts::format_actions(list));
  if (again.devices != list.devices) __builtin_trap();
  return 0;
}
