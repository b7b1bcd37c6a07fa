// QuickFIX/C++'s FIX 4.4 codec timed the way bench/src/bin/fix_codec.rs times keel's: encode a
// NewOrderSingle (header with CompIDs, MsgSeqNum and SendingTime; ClOrdID, Symbol, Side,
// TransactTime, OrderQty, OrdType, Price, TimeInForce; BodyLength and CheckSum) into its text,
// and decode an ExecutionReport (parse with BodyLength and CheckSum checked, then read ClOrdID,
// ExecType, OrdStatus, LastQty, LastPx, CumQty, LeavesQty). Each sample is the mean of one batch.
//
// usage: codec <batches> <batch size> <ExecutionReport with | for SOH>
// stdout: one line per sample, "encode <ns per message>" or "decode <ns per message>".

#include <quickfix/Message.h>
#include <quickfix/fix44/ExecutionReport.h>
#include <quickfix/fix44/NewOrderSingle.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

static long long now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: codec <batches> <batch size> <ExecutionReport>\n");
    return 2;
  }
  long batches = std::atol(argv[1]);
  long size = std::atol(argv[2]);
  std::string report = argv[3];
  std::replace(report.begin(), report.end(), '|', '\x01');
  long long sink = 0;
  std::string out;
  for (long b = 0; b < batches; ++b) {
    long long t0 = now_ns();
    for (long i = 0; i < size; ++i) {
      FIX44::NewOrderSingle m(FIX::ClOrdID(std::to_string(1000000 + b * size + i)),
                              FIX::Side(FIX::Side_BUY), FIX::TransactTime(),
                              FIX::OrdType(FIX::OrdType_LIMIT));
      FIX::Header& h = m.getHeader();
      h.setField(FIX::SenderCompID("KEEL"));
      h.setField(FIX::TargetCompID("VENUE"));
      h.setField(FIX::MsgSeqNum((int)(b * size + i + 1)));
      h.setField(FIX::SendingTime());
      m.set(FIX::Symbol("AAPL"));
      m.set(FIX::OrderQty(100));
      m.set(FIX::Price(100.5));
      m.set(FIX::TimeInForce(FIX::TimeInForce_DAY));
      m.toString(out);
      sink += (long long)out.size();
    }
    long long t1 = now_ns();
    for (long i = 0; i < size; ++i) {
      FIX::Message m;
      m.setString(report, true);
      FIX::ClOrdID id;
      FIX::ExecType et;
      FIX::OrdStatus st;
      FIX::LastQty lq;
      FIX::LastPx lp;
      FIX::CumQty cq;
      FIX::LeavesQty lv;
      m.getField(id);
      m.getField(et);
      m.getField(st);
      m.getField(lq);
      m.getField(lp);
      m.getField(cq);
      m.getField(lv);
      sink += (long long)id.getValue().size() + et.getValue() + (long long)lq.getValue() +
              (long long)(lp.getValue() * 10000) + (long long)cq.getValue() +
              (long long)lv.getValue() + st.getValue();
    }
    long long t2 = now_ns();
    std::printf("encode %.3f\ndecode %.3f\n", (double)(t1 - t0) / size, (double)(t2 - t1) / size);
  }
  std::fprintf(stderr, "checksum %lld\n", sink);
  return 0;
}
