// The report as pictures, each one self-contained SVG (no external script,
// style or font; opens in any browser and in the Pyroscope-less laptop):
//   flamegraph: bytes in use per stack (or bytes gained, with --base), the
//               root at the bottom, click a frame to zoom, Ctrl-F or the
//               Search button to highlight by regular expression;
//   trend:      bytes in use over the snapshots for the top sites and in all.
// The views open on a URL fragment too (#zoom=N, #search=RE), which is how
// the tests drive them in a real browser.
#pragma once

#include <string>
#include <vector>

#include "profile/sites.h"

namespace memprofile {

// One stack of the flame graph, outermost frame first, with its weight.
struct FoldedStack {
  std::vector<std::string> frames;
  double bytes = 0;
};

// The stacks of `snap`, symbolised and folded as the sites are (the
// allocator's frames at the leaf dropped), outermost first.
std::vector<FoldedStack> folded_stacks(const HeapSnapshot& snap, Symbolizer& symbolizer);

// The stacks of `last` that grew since `first` (last minus first, where
// positive), for a growth flame graph.
std::vector<FoldedStack> grown_stacks(const std::vector<FoldedStack>& first, const std::vector<FoldedStack>& last);

std::string flamegraph_svg(const std::vector<FoldedStack>& stacks, const std::string& title, const std::string& subtitle);

// `sites` sorted as they should be drawn (at most 8 are); `labels` names a
// point on the x axis per snapshot.
std::string trend_svg(const SiteTable& table, const std::vector<const Site*>& sites,
                      const std::vector<std::string>& labels, const std::string& title,
                      const std::string& total_name = "all");

}  // namespace memprofile
