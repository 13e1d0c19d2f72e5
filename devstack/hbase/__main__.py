"""`python -m devstack.hbase`: run the HBase Thrift stand-in in the foreground (see server.main)."""
import sys

from devstack.hbase.server import main

sys.exit(main())
