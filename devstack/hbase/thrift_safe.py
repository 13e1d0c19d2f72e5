"""Makes every call of the Hbase service answer the client, including the unimplemented ones.

thriftpy2's processor only sends back the exceptions a method declares in the IDL. Anything
else escapes the processor and closes the client's connection: a handler method that does not
exist raises AttributeError there, so a call the stand-in lacks would leave happybase with a
dropped connection instead of an answer. `thrift_safe` closes both holes:

* an undeclared exception (a stand-in bug, or IllegalArgument from a call that cannot throw it)
  becomes the IDL's IOError, and the connection stays usable;
* every IDL call the handler does not define gets a method raising IOError
  "<call> is not implemented by the HBase Thrift stand-in" (every call of Hbase.thrift declares
  IOError; should one not, a TApplicationException UNKNOWN_METHOD says the same).
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from thriftpy2.thrift import TApplicationException

from devstack.hbase.idl import (
    AlreadyExists,
    Hbase_thrift,
    HbaseIOError,
    IllegalArgument,
)

logger = logging.getLogger(__name__)


def _declared(api: str) -> tuple[type, ...]:
    spec = getattr(Hbase_thrift.Hbase, api + "_result").thrift_spec
    return tuple(v[2] for v in spec.values() if v[1] != "success")


def _wrap(api: str, func: Callable) -> Callable:
    allowed = _declared(api)

    @functools.wraps(func)
    def call(self, *args):
        try:
            return func(self, *args)
        except allowed:
            raise
        except (IllegalArgument, AlreadyExists, HbaseIOError) as exc:
            raise HbaseIOError(message=exc.message) from exc
        except Exception as exc:  # a stand-in bug: report it, keep the connection alive
            logger.exception("%s failed", api)
            raise HbaseIOError(
                message=f"internal error in the HBase stand-in during {api}: {exc!r}"
            ) from exc

    return call


def _not_implemented(api: str) -> Callable:
    message = f"{api} is not implemented by the HBase Thrift stand-in"

    def call(self, *args):
        if HbaseIOError in _declared(api):
            raise HbaseIOError(message=message)
        raise TApplicationException(TApplicationException.UNKNOWN_METHOD, message)

    call.__name__ = api
    return call


def thrift_safe(cls):
    """Class decorator: wrap each Hbase service method of `cls`, fill in the missing ones."""
    for api in Hbase_thrift.Hbase.thrift_services:
        if api in cls.__dict__:
            setattr(cls, api, _wrap(api, cls.__dict__[api]))
        else:
            setattr(cls, api, _not_implemented(api))
    return cls
