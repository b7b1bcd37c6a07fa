// A FIX 4.4 trader on QuickFIX/C++ (Debian's libquickfix), for keel's interop tests: it logs
// on to keel's venue (`keel venue --fix-listen`) with SenderCompID QF and trades as the test
// tells it. QuickFIX's own session layer (logon with a password, heartbeats, test requests,
// resend requests, gap fills, validation of every message against the FIX 4.4 data
// dictionary) is what keel's venue is tested against.
//
// usage: initiator <settings file>
// stdin, one command per line:
//   order <ClOrdID> <qty> <price>          a limit buy of MSFT, day
//   cancel <ClOrdID> <OrigClOrdID>          an OrderCancelRequest
//   replace <ClOrdID> <OrigClOrdID> <qty> <price>
//   status <ClOrdID>                        an OrderStatusRequest
//   mass <MassStatusReqID>                  an OrderMassStatusRequest (all orders)
//   gap <n>                                 skip n outbound sequence numbers
//   disconnect                              drop the connection (no Logout)
//   logout                                  a Logout
//   testrequest <id>                        a TestRequest
//   next                                    print "next <sender> <target>" numbers
// stdout, one event per line: "ready", "logon", "logout",
// "er <ExecType> <OrdStatus> <ClOrdID> <CumQty> <LeavesQty> <LastQty> <PossDup>" for every
// ExecutionReport, "cancel-reject <ClOrdID> <CxlRejReason>", "business-reject <reason>",
// "admin <MsgType> <MsgSeqNum>" for every session message received, "reject-sent <text>" and
// "logout-sent <text>" for what QuickFIX refused in the venue's traffic.

#include <quickfix/Application.h>
#include <quickfix/FileLog.h>
#include <quickfix/FileStore.h>
#include <quickfix/MessageCracker.h>
#include <quickfix/Session.h>
#include <quickfix/SessionSettings.h>
#include <quickfix/SocketInitiator.h>
#include <quickfix/fix44/BusinessMessageReject.h>
#include <quickfix/fix44/ExecutionReport.h>
#include <quickfix/fix44/NewOrderSingle.h>
#include <quickfix/fix44/OrderCancelReject.h>
#include <quickfix/fix44/OrderCancelReplaceRequest.h>
#include <quickfix/fix44/OrderCancelRequest.h>
#include <quickfix/fix44/OrderMassStatusRequest.h>
#include <quickfix/fix44/OrderStatusRequest.h>

#include <iostream>
#include <mutex>
#include <sstream>
#include <string>

namespace {

std::mutex out_lock;

void say(const std::string& line) {
  std::lock_guard<std::mutex> guard(out_lock);
  std::cout << line << std::endl;
}

class Trader : public FIX::Application, public FIX::MessageCracker {
 public:
  void onCreate(const FIX::SessionID& id) override { session_ = id; }
  void onLogon(const FIX::SessionID&) override { say("logon"); }
  void onLogout(const FIX::SessionID&) override { say("logout"); }
  void toAdmin(FIX::Message& m, const FIX::SessionID&) override {
    FIX::MsgType type;
    m.getHeader().getField(type);
    if (type == FIX::MsgType_Logon) m.setField(FIX::Password("keel"));
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
    say("admin " + type.getValue() + " " + std::to_string(seq.getValue()));
  }
  void fromApp(const FIX::Message& m, const FIX::SessionID& id) throw(
      FIX::FieldNotFound, FIX::IncorrectDataFormat, FIX::IncorrectTagValue,
      FIX::UnsupportedMessageType) override {
    crack(m, id);
  }

  void onMessage(const FIX44::ExecutionReport& r, const FIX::SessionID&) override {
    FIX::ExecType et;
    FIX::OrdStatus st;
    FIX::ClOrdID id;
    FIX::CumQty cum;
    FIX::LeavesQty leaves;
    r.get(et);
    r.get(st);
    r.get(cum);
    r.get(leaves);
    std::string cl = r.isSetField(id) ? r.getField(FIX::FIELD::ClOrdID) : "-";
    long last = 0;
    if (r.isSetField(FIX::FIELD::LastQty)) {
      FIX::LastQty q;
      r.get(q);
      last = (long)q.getValue();
    }
    FIX::PossDupFlag dup(false);
    if (r.getHeader().isSetField(dup)) r.getHeader().getField(dup);
    say("er " + std::string(1, et.getValue()) + " " + std::string(1, st.getValue()) + " " + cl +
        " " + std::to_string((long)cum.getValue()) + " " +
        std::to_string((long)leaves.getValue()) + " " + std::to_string(last) + " " +
        (dup.getValue() ? "Y" : "N"));
  }

  void onMessage(const FIX44::OrderCancelReject& r, const FIX::SessionID&) override {
    FIX::ClOrdID id;
    r.get(id);
    std::string reason = r.isSetField(FIX::FIELD::CxlRejReason)
                             ? r.getField(FIX::FIELD::CxlRejReason)
                             : "-";
    say("cancel-reject " + id.getValue() + " " + reason);
  }

  void onMessage(const FIX44::BusinessMessageReject& r, const FIX::SessionID&) override {
    FIX::BusinessRejectReason reason;
    r.get(reason);
    say("business-reject " + std::to_string(reason.getValue()));
  }

  void command(const std::string& line) {
    std::istringstream in(line);
    std::string verb;
    in >> verb;
    FIX::Session* s = FIX::Session::lookupSession(session_);
    if (verb == "order") {
      std::string id;
      long qty;
      std::string price;
      in >> id >> qty >> price;
      FIX44::NewOrderSingle m(FIX::ClOrdID(id), FIX::Side(FIX::Side_BUY), FIX::TransactTime(),
                              FIX::OrdType(FIX::OrdType_LIMIT));
      m.set(FIX::Symbol("MSFT"));
      m.set(FIX::OrderQty(qty));
      m.setField(FIX::FIELD::Price, price);
      m.set(FIX::TimeInForce(FIX::TimeInForce_DAY));
      FIX::Session::sendToTarget(m, session_);
    } else if (verb == "cancel") {
      std::string id, orig;
      in >> id >> orig;
      FIX44::OrderCancelRequest m(FIX::OrigClOrdID(orig), FIX::ClOrdID(id),
                                  FIX::Side(FIX::Side_BUY), FIX::TransactTime());
      m.set(FIX::Symbol("MSFT"));
      FIX::Session::sendToTarget(m, session_);
    } else if (verb == "replace") {
      std::string id, orig, price;
      long qty;
      in >> id >> orig >> qty >> price;
      FIX44::OrderCancelReplaceRequest m(FIX::OrigClOrdID(orig), FIX::ClOrdID(id),
                                         FIX::Side(FIX::Side_BUY), FIX::TransactTime(),
                                         FIX::OrdType(FIX::OrdType_LIMIT));
      m.set(FIX::Symbol("MSFT"));
      m.set(FIX::OrderQty(qty));
      m.setField(FIX::FIELD::Price, price);
      FIX::Session::sendToTarget(m, session_);
    } else if (verb == "status") {
      std::string id;
      in >> id;
      FIX44::OrderStatusRequest m(FIX::ClOrdID(id), FIX::Side(FIX::Side_BUY));
      m.set(FIX::Symbol("MSFT"));
      m.set(FIX::OrdStatusReqID("S-" + id));
      FIX::Session::sendToTarget(m, session_);
    } else if (verb == "mass") {
      std::string id;
      in >> id;
      FIX44::OrderMassStatusRequest m(FIX::MassStatusReqID(id),
                                      FIX::MassStatusReqType(FIX::MassStatusReqType_STATUS_FOR_ALL_ORDERS));
      FIX::Session::sendToTarget(m, session_);
    } else if (verb == "gap" && s) {
      int n;
      in >> n;
      s->setNextSenderMsgSeqNum(s->getExpectedSenderNum() + n);
      say("gapped " + std::to_string(s->getExpectedSenderNum()));
      return;
    } else if (verb == "disconnect" && s) {
      s->disconnect();
      say("disconnected");
      return;
    } else if (verb == "logout" && s) {
      s->logout("trader done");
      say("logging-out");
      return;
    } else if (verb == "testrequest") {
      std::string id;
      in >> id;
      FIX::Message m;
      m.getHeader().setField(FIX::MsgType(FIX::MsgType_TestRequest));
      m.setField(FIX::TestReqID(id));
      FIX::Session::sendToTarget(m, session_);
    } else if (verb == "next" && s) {
      say("next " + std::to_string(s->getExpectedSenderNum()) + " " +
          std::to_string(s->getExpectedTargetNum()));
      return;
    } else {
      say("error unknown command " + line);
      return;
    }
    say("sent " + verb);
  }

 private:
  FIX::SessionID session_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: initiator <settings file>" << std::endl;
    return 2;
  }
  try {
    FIX::SessionSettings settings(argv[1]);
    Trader trader;
    FIX::FileStoreFactory store(settings);
    FIX::FileLogFactory log(settings);
    FIX::SocketInitiator initiator(trader, store, settings, log);
    initiator.start();
    say("ready");
    std::string line;
    while (std::getline(std::cin, line)) {
      if (!line.empty()) trader.command(line);
    }
    initiator.stop();
  } catch (std::exception& e) {
    std::cerr << "initiator: " << e.what() << std::endl;
    say(std::string("failed ") + e.what());
    return 1;
  }
  return 0;
}
