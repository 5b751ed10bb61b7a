"""An OTLP/HTTP receiver for the tests of `guard --otel`.

Listens on 127.0.0.1 (a free port), prints `port N` as its first stdout
line, then decodes every request with the official `opentelemetry-proto`
package (PyPI) and prints one JSON line per span and per metric data point
it got:

  {"signal": "span", "name": ..., "trace_id": hex, "span_id": hex,
   "parent_span_id": hex, "kind": int, "status": {"code": int, "message": str},
   "attributes": {...}, "resource": {...}, "scope": str,
   "start_ns": int, "end_ns": int}
  {"signal": "metric", "name": ..., "unit": ..., "kind": "histogram"|"sum",
   "attributes": {...}, "resource": {...}, "count": int, "sum": float,
   "bounds": [...], "value": int}

Modes (argv[1]): `ok` (the default) answers 200; `fail` answers 503 to
everything; `hang` accepts and never answers (a collector that is stuck).
"""

import http.server
import json
import sys
import threading

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
out_lock = threading.Lock()


def emit(obj):
    with out_lock:
        sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
        sys.stdout.flush()


def value(any_value):
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    v = getattr(any_value, kind)
    if kind == "array_value":
        return [value(x) for x in v.values]
    if kind == "kvlist_value":
        return attrs(v.values)
    return v


def attrs(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def spans(body):
    req = trace_service_pb2.ExportTraceServiceRequest()
    req.ParseFromString(body)
    for rs in req.resource_spans:
        resource = attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                emit({
                    "signal": "span",
                    "name": s.name,
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent_span_id": s.parent_span_id.hex(),
                    "kind": s.kind,
                    "status": {"code": s.status.code, "message": s.status.message},
                    "attributes": attrs(s.attributes),
                    "resource": resource,
                    "scope": ss.scope.name,
                    "start_ns": s.start_time_unix_nano,
                    "end_ns": s.end_time_unix_nano,
                })


def metrics(body):
    req = metrics_service_pb2.ExportMetricsServiceRequest()
    req.ParseFromString(body)
    for rm in req.resource_metrics:
        resource = attrs(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                if kind == "histogram":
                    for p in m.histogram.data_points:
                        emit({
                            "signal": "metric", "name": m.name, "unit": m.unit,
                            "kind": "histogram", "attributes": attrs(p.attributes),
                            "resource": resource, "count": p.count, "sum": p.sum,
                            "bounds": list(p.explicit_bounds),
                        })
                elif kind == "sum":
                    for p in m.sum.data_points:
                        emit({
                            "signal": "metric", "name": m.name, "unit": m.unit,
                            "kind": "sum", "attributes": attrs(p.attributes),
                            "resource": resource,
                            "value": p.as_int if p.WhichOneof("value") == "as_int" else p.as_double,
                        })


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        if MODE == "hang":
            threading.Event().wait()
        if MODE == "fail":
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.headers.get("Content-Type") != "application/x-protobuf":
            emit({"signal": "bad", "content_type": self.headers.get("Content-Type")})
        if self.path == "/v1/traces":
            spans(body)
        elif self.path == "/v1/metrics":
            metrics(body)
        else:
            emit({"signal": "bad", "path": self.path})
        emit({"signal": "request", "path": self.path,
              "authorization": self.headers.get("Authorization")})
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    emit({"port": server.server_address[1]})
    server.serve_forever()


if __name__ == "__main__":
    main()
