// A FIX 4.4 venue on QuickFIX/C++ (Debian's libquickfix), for keel's interop tests: it takes
// NewOrderSingle, OrderCancelRequest, OrderCancelReplaceRequest, OrderStatusRequest and
// OrderMassStatusRequest from one initiator (SenderCompID KEEL) and answers as a venue would.
// Orders rest until the test fills them. QuickFIX's own session layer (logon, heartbeats,
// test requests, resend requests, gap fills, validation against the FIX 4.4 data dictionary)
// is what keel is tested against.
//
// usage: acceptor <settings file>
// stdin, one command per line:
//   fill <ClOrdID> <qty> <price>   an execution of a resting order
//   gap <n>                        skip n outbound sequence numbers (keel must ask for them)
//   disconnect                     drop the connection (no Logout)
//   logout                         a Logout from the venue
//   testrequest <id>               a TestRequest
//   hold                           keep the next NewOrderSingle without answering it (its
//                                  acknowledgement lost: the order rests, keel never hears)
// stdout, one event per line (the test waits for them): "ready", "logon", "logout",
// "new <ClOrdID> <qty> <price>", "cancel <ClOrdID>", "replace <ClOrdID> <OrigClOrdID> <qty>",
// "status <ClOrdID>", "mass-status <n open>", "admin <MsgType> <MsgSeqNum> [TestReqID]" for
// every session message received, "reject-sent <text>" and "logout-sent <text>" for what QuickFIX refused.

#include <quickfix/Application.h>
#include <quickfix/FileLog.h>
#include <quickfix/FileStore.h>
#include <quickfix/Log.h>
#include <quickfix/MessageCracker.h>
#include <quickfix/Session.h>
#include <quickfix/SessionSettings.h>
#include <quickfix/SocketAcceptor.h>
#include <quickfix/fix44/ExecutionReport.h>
#include <quickfix/fix44/NewOrderSingle.h>
#include <quickfix/fix44/OrderCancelReject.h>
#include <quickfix/fix44/OrderCancelReplaceRequest.h>
#include <quickfix/fix44/OrderCancelRequest.h>
#include <quickfix/fix44/OrderMassStatusRequest.h>
#include <quickfix/fix44/OrderStatusRequest.h>

#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

namespace {

std::mutex out_lock;

void say(const std::string& line) {
  std::lock_guard<std::mutex> guard(out_lock);
  std::cout << line << std::endl;
}

struct Order {
  std::string symbol;
  char side;
  long qty;
  long cum;
  double price;
  double notional;
  bool open;
  std::string order_id;
};

class Venue : public FIX::Application, public FIX::MessageCracker {
 public:
  // Commands (fills, gaps, disconnects) act on keel's session (TargetCompID KEEL); answers go
  // to the session a request came in on (a benchmark adds a QuickFIX initiator's, QF).
  void onCreate(const FIX::SessionID& id) override {
    if (id.getTargetCompID().getValue() == "KEEL" || session_.getTargetCompID().getValue().empty())
      session_ = id;
  }
  void onLogon(const FIX::SessionID&) override { say("logon"); }
  void onLogout(const FIX::SessionID&) override { say("logout"); }
  void toAdmin(FIX::Message& m, const FIX::SessionID&) override {
    // A Reject or Logout QuickFIX sends says what it refused in keel's traffic.
    FIX::MsgType type;
    m.getHeader().getField(type);
    if (type == FIX::MsgType_Reject || type == FIX::MsgType_Logout) {
      FIX::Text text;
      std::string why;
      if (m.isSetField(text)) {
        m.getField(text);
        why = text.getValue();
      }
      say((type == FIX::MsgType_Reject ? "reject-sent " : "logout-sent ") + why);
    }
  }
  void toApp(FIX::Message&, const FIX::SessionID&) throw(FIX::DoNotSend) override {}
  void fromAdmin(const FIX::Message& m, const FIX::SessionID&) throw(
      FIX::FieldNotFound, FIX::IncorrectDataFormat, FIX::IncorrectTagValue,
      FIX::RejectLogon) override {
    FIX::MsgType type;
    FIX::MsgSeqNum seq;
    m.getHeader().getField(type);
    m.getHeader().getField(seq);
    std::string line = "admin " + type.getValue() + " " + std::to_string(seq.getValue());
    FIX::TestReqID id;
    if (m.isSetField(id)) {
      m.getField(id);
      line += " " + id.getValue();
    }
    say(line);
  }
  void fromApp(const FIX::Message& m, const FIX::SessionID& id) throw(
      FIX::FieldNotFound, FIX::IncorrectDataFormat, FIX::IncorrectTagValue,
      FIX::UnsupportedMessageType) override {
    std::lock_guard<std::mutex> guard(lock_);
    reply_ = id;
    crack(m, id);
  }

  void onMessage(const FIX44::NewOrderSingle& m, const FIX::SessionID&) override {
    FIX::ClOrdID id;
    FIX::Symbol symbol;
    FIX::Side side;
    FIX::OrderQty qty;
    FIX::Price price;
    m.get(id);
    m.get(symbol);
    m.get(side);
    m.get(qty);
    m.get(price);
    Order o{symbol.getValue(), side.getValue(), (long)qty.getValue(), 0,
            price.getValue(),  0.0,             true,
            "V" + std::to_string(++next_order_)};
    if (orders_.count(key(id.getValue()))) {
      report(id.getValue(), "", o, FIX::ExecType_REJECTED, FIX::OrdStatus_REJECTED, 0, 0, 6);
      return;
    }
    orders_[key(id.getValue())] = o;
    if (hold_next_) {
      hold_next_ = false;
      say("held " + id.getValue());
      return;
    }
    say("new " + id.getValue() + " " + std::to_string(o.qty) + " " + price.getString());
    report(id.getValue(), "", o, FIX::ExecType_NEW, FIX::OrdStatus_NEW, 0, 0, -1);
  }

  void onMessage(const FIX44::OrderCancelRequest& m, const FIX::SessionID&) override {
    FIX::ClOrdID id;
    FIX::OrigClOrdID orig;
    m.get(id);
    m.get(orig);
    say("cancel " + orig.getValue());
    auto it = orders_.find(key(orig.getValue()));
    if (it == orders_.end() || !it->second.open) {
      cancel_reject(id.getValue(), orig.getValue(), it == orders_.end() ? 1 : 0,
                    FIX::CxlRejResponseTo_ORDER_CANCEL_REQUEST);
      return;
    }
    it->second.open = false;
    report(id.getValue(), orig.getValue(), it->second, FIX::ExecType_CANCELED,
           FIX::OrdStatus_CANCELED, 0, 0, -1);
  }

  void onMessage(const FIX44::OrderCancelReplaceRequest& m, const FIX::SessionID&) override {
    FIX::ClOrdID id;
    FIX::OrigClOrdID orig;
    FIX::OrderQty qty;
    FIX::Price price;
    m.get(id);
    m.get(orig);
    m.get(qty);
    m.get(price);
    say("replace " + id.getValue() + " " + orig.getValue() + " " +
        std::to_string((long)qty.getValue()));
    auto it = orders_.find(key(orig.getValue()));
    if (it == orders_.end() || !it->second.open || (long)qty.getValue() <= it->second.cum) {
      cancel_reject(id.getValue(), orig.getValue(), it == orders_.end() ? 1 : 0,
                    FIX::CxlRejResponseTo_ORDER_CANCEL_REPLACE_REQUEST);
      return;
    }
    Order o = it->second;
    it->second.open = false;
    o.qty = (long)qty.getValue();
    o.price = price.getValue();
    orders_[key(id.getValue())] = o;
    report(id.getValue(), orig.getValue(), o, FIX::ExecType_REPLACED,
           o.cum > 0 ? FIX::OrdStatus_PARTIALLY_FILLED : FIX::OrdStatus_NEW, 0, 0, -1);
  }

  void onMessage(const FIX44::OrderStatusRequest& m, const FIX::SessionID&) override {
    FIX::ClOrdID id;
    m.get(id);
    say("status " + id.getValue());
    FIX44::ExecutionReport r = status_of(id.getValue());
    if (m.isSetField(FIX::FIELD::OrdStatusReqID)) {
      FIX::OrdStatusReqID req;
      m.get(req);
      r.set(req);
    }
    FIX::Session::sendToTarget(r, reply_);
  }

  void onMessage(const FIX44::OrderMassStatusRequest& m, const FIX::SessionID&) override {
    FIX::MassStatusReqID req;
    m.get(req);
    std::vector<std::string> open;
    const std::string mine = key("");
    for (const auto& kv : orders_) {
      if (kv.second.open && kv.first.compare(0, mine.size(), mine) == 0)
        open.push_back(kv.first.substr(mine.size()));
    }
    say("mass-status " + std::to_string(open.size()));
    if (open.empty()) {
      FIX44::ExecutionReport r(FIX::OrderID("NONE"), FIX::ExecID(exec_id()),
                               FIX::ExecType(FIX::ExecType_ORDER_STATUS),
                               FIX::OrdStatus(FIX::OrdStatus_REJECTED), FIX::Side(FIX::Side_BUY),
                               FIX::LeavesQty(0), FIX::CumQty(0), FIX::AvgPx(0));
      r.set(req);
      r.setField(FIX::TotNumReports(0));
      r.setField(FIX::LastRptRequested(true));
      FIX::Session::sendToTarget(r, reply_);
      return;
    }
    for (size_t i = 0; i < open.size(); ++i) {
      FIX44::ExecutionReport r = status_of(open[i]);
      r.set(req);
      r.setField(FIX::TotNumReports((int)open.size()));
      if (i + 1 == open.size()) r.setField(FIX::LastRptRequested(true));
      FIX::Session::sendToTarget(r, reply_);
    }
  }

  // A command from stdin.
  void command(const std::string& line) {
    std::istringstream in(line);
    std::string verb;
    in >> verb;
    FIX::Session* s = FIX::Session::lookupSession(session_);
    if (verb == "fill") {
      std::string id;
      long qty;
      double price;
      in >> id >> qty >> price;
      std::lock_guard<std::mutex> guard(lock_);
      reply_ = session_;
      auto it = orders_.find(key(id));
      if (it == orders_.end() || !it->second.open) {
        say("error no open order " + id);
        return;
      }
      Order& o = it->second;
      o.cum += qty;
      o.notional += price * qty;
      o.open = o.cum < o.qty;
      report(id, "", o, FIX::ExecType_TRADE,
             o.open ? FIX::OrdStatus_PARTIALLY_FILLED : FIX::OrdStatus_FILLED, qty, price, -1);
      say("filled " + id);
    } else if (verb == "gap" && s) {
      int n;
      in >> n;
      s->setNextSenderMsgSeqNum(s->getExpectedSenderNum() + n);
      say("gapped " + std::to_string(s->getExpectedSenderNum()));
    } else if (verb == "disconnect" && s) {
      s->disconnect();
      say("disconnected");
    } else if (verb == "logout" && s) {
      s->logout("venue closing");
      say("logging-out");
    } else if (verb == "testrequest") {
      std::string id;
      in >> id;
      FIX::Message m;
      m.getHeader().setField(FIX::MsgType(FIX::MsgType_TestRequest));
      m.setField(FIX::TestReqID(id));
      FIX::Session::sendToTarget(m, session_);
      say("sent-testrequest " + id);
    } else if (verb == "hold") {
      std::lock_guard<std::mutex> guard(lock_);
      hold_next_ = true;
      say("holding");
    } else if (verb == "next") {
      if (s) {
        say("next " + std::to_string(s->getExpectedSenderNum()) + " " +
            std::to_string(s->getExpectedTargetNum()));
      }
    } else {
      say("error unknown command " + line);
    }
  }

 private:
  bool hold_next_ = false;
  std::string exec_id() { return "E" + std::to_string(++next_exec_); }

  void report(const std::string& id, const std::string& orig, const Order& o, char exec_type,
              char status, long last_qty, double last_px, int reject_reason) {
    double avg = o.cum > 0 ? o.notional / o.cum : 0;
    FIX44::ExecutionReport r(FIX::OrderID(o.order_id), FIX::ExecID(exec_id()),
                             FIX::ExecType(exec_type), FIX::OrdStatus(status), FIX::Side(o.side),
                             FIX::LeavesQty(o.open ? o.qty - o.cum : 0), FIX::CumQty(o.cum),
                             FIX::AvgPx(avg));
    r.set(FIX::ClOrdID(id));
    if (!orig.empty()) r.set(FIX::OrigClOrdID(orig));
    r.set(FIX::Symbol(o.symbol));
    r.set(FIX::OrderQty(o.qty));
    r.set(FIX::Price(o.price));
    if (last_qty > 0) {
      r.set(FIX::LastQty(last_qty));
      r.set(FIX::LastPx(last_px));
    }
    if (reject_reason >= 0) r.set(FIX::OrdRejReason(reject_reason));
    FIX::Session::sendToTarget(r, reply_);
  }

  FIX44::ExecutionReport status_of(const std::string& id) {
    auto it = orders_.find(key(id));
    if (it == orders_.end()) {
      FIX44::ExecutionReport r(FIX::OrderID("NONE"), FIX::ExecID(exec_id()),
                               FIX::ExecType(FIX::ExecType_ORDER_STATUS),
                               FIX::OrdStatus(FIX::OrdStatus_REJECTED), FIX::Side(FIX::Side_BUY),
                               FIX::LeavesQty(0), FIX::CumQty(0), FIX::AvgPx(0));
      r.set(FIX::ClOrdID(id));
      r.set(FIX::OrdRejReason(FIX::OrdRejReason_UNKNOWN_ORDER));
      return r;
    }
    const Order& o = it->second;
    char status = o.open ? (o.cum > 0 ? FIX::OrdStatus_PARTIALLY_FILLED : FIX::OrdStatus_NEW)
                         : (o.cum >= o.qty ? FIX::OrdStatus_FILLED : FIX::OrdStatus_CANCELED);
    FIX44::ExecutionReport r(FIX::OrderID(o.order_id), FIX::ExecID(exec_id()),
                             FIX::ExecType(FIX::ExecType_ORDER_STATUS), FIX::OrdStatus(status),
                             FIX::Side(o.side), FIX::LeavesQty(o.open ? o.qty - o.cum : 0),
                             FIX::CumQty(o.cum), FIX::AvgPx(o.cum > 0 ? o.notional / o.cum : 0));
    r.set(FIX::ClOrdID(id));
    r.set(FIX::Symbol(o.symbol));
    r.set(FIX::OrderQty(o.qty));
    return r;
  }

  void cancel_reject(const std::string& id, const std::string& orig, int reason,
                     char response_to) {
    auto it = orders_.find(key(orig));
    char status = FIX::OrdStatus_REJECTED;
    if (it != orders_.end()) {
      const Order& o = it->second;
      status = o.open ? FIX::OrdStatus_NEW
                      : (o.cum >= o.qty ? FIX::OrdStatus_FILLED : FIX::OrdStatus_CANCELED);
    }
    FIX44::OrderCancelReject r(
        FIX::OrderID(it == orders_.end() ? "NONE" : it->second.order_id), FIX::ClOrdID(id),
        FIX::OrigClOrdID(orig), FIX::OrdStatus(status), FIX::CxlRejResponseTo(response_to));
    r.set(FIX::CxlRejReason(reason));
    FIX::Session::sendToTarget(r, reply_);
  }

  // Orders are kept per session: two initiators may use the same ClOrdIDs.
  std::string key(const std::string& id) { return reply_.getTargetCompID().getValue() + "/" + id; }

  std::mutex lock_;
  FIX::SessionID session_;
  FIX::SessionID reply_;
  std::map<std::string, Order> orders_;
  long next_order_ = 0;
  long next_exec_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: acceptor <settings file>" << std::endl;
    return 2;
  }
  try {
    FIX::SessionSettings settings(argv[1]);
    Venue venue;
    FIX::FileStoreFactory store(settings);
    FIX::FileLogFactory log(settings);
    FIX::SocketAcceptor acceptor(venue, store, settings, log);
    acceptor.start();
    say("ready");
    std::string line;
    while (std::getline(std::cin, line)) {
      if (!line.empty()) venue.command(line);
    }
    acceptor.stop();
  } catch (std::exception& e) {
    std::cerr << "acceptor: " << e.what() << std::endl;
    say(std::string("failed ") + e.what());
    return 1;
  }
  return 0;
}
