// A QuickFIX/C++ initiator timing order round trips the way bench/src/bin/fix_rtt.rs times
// keel's: a NewOrderSingle out, its ExecutionReport (New) back, one order at a time. The next
// order is sent from the callback that receives the acknowledgement (QuickFIX's own thread:
// no hand-off between threads is timed).
//
// usage: initiator <settings file> <orders>
// stdout: "rtt <ns>" per order, then "done".

#include <quickfix/Application.h>
#include <quickfix/FileStore.h>
#include <quickfix/MessageCracker.h>
#include <quickfix/NullStore.h>
#include <quickfix/Session.h>
#include <quickfix/SessionSettings.h>
#include <quickfix/SocketInitiator.h>
#include <quickfix/fix44/ExecutionReport.h>
#include <quickfix/fix44/NewOrderSingle.h>

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

static long long now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

class Trader : public FIX::Application, public FIX::MessageCracker {
 public:
  explicit Trader(long orders) : orders_(orders) { rtts_.reserve(orders); }
  void onCreate(const FIX::SessionID&) override {}
  // The first order goes from the main thread once the session is logged on (QuickFIX calls
  // onLogon before its own state says so: an order sent from it may wait in the store).
  void onLogon(const FIX::SessionID& id) override {
    session_ = id;
    logged_on_ = true;
  }
  bool logged_on() const { return logged_on_; }
  void start() { send(); }
  void onLogout(const FIX::SessionID&) override {}
  void toAdmin(FIX::Message&, const FIX::SessionID&) override {}
  void toApp(FIX::Message&, const FIX::SessionID&) throw(FIX::DoNotSend) override {}
  void fromAdmin(const FIX::Message&, const FIX::SessionID&) throw(
      FIX::FieldNotFound, FIX::IncorrectDataFormat, FIX::IncorrectTagValue,
      FIX::RejectLogon) override {}
  void fromApp(const FIX::Message& m, const FIX::SessionID& id) throw(
      FIX::FieldNotFound, FIX::IncorrectDataFormat, FIX::IncorrectTagValue,
      FIX::UnsupportedMessageType) override {
    crack(m, id);
  }
  void onMessage(const FIX44::ExecutionReport& r, const FIX::SessionID&) override {
    FIX::ExecType et;
    r.get(et);
    if (et.getValue() == FIX::ExecType_REJECTED) {
      std::fprintf(stderr, "initiator: order %ld rejected\n", next_);
      std::exit(1);
    }
    if (et.getValue() != FIX::ExecType_NEW) return;
    rtts_.push_back(now_ns() - sent_ns_);
    if ((long)rtts_.size() < orders_) {
      send();
    } else {
      done_ = true;
    }
  }
  bool done() const { return done_; }
  const std::vector<long long>& rtts() const { return rtts_; }

 private:
  void send() {
    ++next_;
    // ClOrdIDs unique across runs against one acceptor: the process id, then a count.
    FIX44::NewOrderSingle m(FIX::ClOrdID(std::to_string(getpid()) + "-" + std::to_string(next_)),
                            FIX::Side(FIX::Side_BUY),
                            FIX::TransactTime(), FIX::OrdType(FIX::OrdType_LIMIT));
    m.set(FIX::Symbol("MSFT"));
    m.set(FIX::OrderQty(10));
    m.set(FIX::Price(50));
    m.set(FIX::TimeInForce(FIX::TimeInForce_DAY));
    sent_ns_ = now_ns();
    FIX::Session::sendToTarget(m, session_);
  }
  long orders_;
  long next_ = 0;
  long long sent_ns_ = 0;
  std::vector<long long> rtts_;
  std::atomic<bool> done_{false};
  std::atomic<bool> logged_on_{false};
  FIX::SessionID session_;
};

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: initiator <settings file> <orders>\n");
    return 2;
  }
  try {
    FIX::SessionSettings settings(argv[1]);
    Trader trader(std::atol(argv[2]));
    FIX::NullStoreFactory store;
    FIX::SocketInitiator initiator(trader, store, settings);
    initiator.start();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!trader.logged_on() || !FIX::Session::lookupSession(
                                      *initiator.getSessions().begin())->isLoggedOn()) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "initiator: no logon\n");
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    trader.start();
    while (!trader.done()) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "initiator: timed out after %zu orders\n", trader.rtts().size());
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    initiator.stop();
    for (long long ns : trader.rtts()) std::printf("rtt %lld\n", ns);
    std::printf("done\n");
  } catch (std::exception& e) {
    std::fprintf(stderr, "initiator: %s\n", e.what());
    return 1;
  }
  return 0;
}
