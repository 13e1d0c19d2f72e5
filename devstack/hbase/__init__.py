"""An in-memory HBase Thrift 1 server stand-in for dev and tests (HBase cannot be installed here).

It is a real Thrift server built with thriftpy2 from the `Hbase.thrift` IDL that happybase
ships, so happybase talks real Thrift over TCP to it, exactly as it would to HBase's own
`hbase thrift start` server (buffered transport + binary protocol by default, as happybase).

    python -m devstack.hbase --host 127.0.0.1 --port 19090 [--framed] [--compact]

In-process (unit tests)::

    from devstack.hbase.server import make_server, start_in_thread, stop_server
    server = make_server("127.0.0.1", port)
    thread = start_in_thread(server)       # listening when this returns
    ...
    stop_server(server, thread)

Behaviour mirrors HBase's Thrift 1 handler (`ThriftHBaseServiceHandler`) and the region server
semantics it exposes, for the calls happybase makes on behalf of our code and of
`tests/integration/test_hbase_standin_contract.py`; every other call of the IDL answers with the IDL's
`IOError` "... is not implemented by the HBase Thrift stand-in". Deliberate simplifications:

* one table = one region; data lives in memory only and is lost when the process exits;
* a call is atomic (one lock for the whole handler), also across rows (HBase is atomic per row);
* a scanner reads the live table each time `scannerGetList` is called (it does not pin an MVCC
  snapshot when opened, as an HBase region scanner does);
* idle scanners are dropped after `SCANNER_IDLE_TIMEOUT_S` (HBase has a 60 s scanner lease);
* filter strings: only `KeyOnlyFilter`, `FirstKeyOnlyFilter` and `PrefixFilter`, alone or
  joined with `AND`; anything else is an IOError "filter not supported by the stand-in: ...".

Modules, by concern:

* `idl`          - the Hbase.thrift IDL loaded by thriftpy2, its structs, HBase constants;
* `table_store`  - tables, rows, cells, versions, delete markers, TTL (no Thrift calls);
* `filters`      - the filter-string subset (parser and what each filter does to a row);
* `scanners`     - open scanner state and how a scanner walks a table;
* `thrift_safe`  - turns handler failures and unimplemented calls into the IDL's IOError;
* `handler`      - the Thrift calls that are used, on top of the table store;
* `server`       - the thriftpy2 server: start, stop, the process entry point.

Never imported by production code.
"""
