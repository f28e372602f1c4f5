// Eventually(pred): polls `pred` for up to 5 s (every 10 ms) — for tests of the listener thread,
// which applies what a socket received asynchronously. Header-only; test code only.
#pragma once

#include <chrono>
#include <thread>

namespace gpuwatch::jobs::testing {

template <typename F>
bool Eventually(F pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

}  // namespace gpuwatch::jobs::testing
