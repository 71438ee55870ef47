"""Turning tracing on: the OpenTelemetry SDK and its exporter, from the standard ``OTEL_*`` variables.

Tracing is on when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``) or, without it, when
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set; ``OTEL_TRACES_EXPORTER=none``
or ``OTEL_SDK_DISABLED=true`` keeps it off. Everything else (service name, sampler, batch delays, headers,
propagators) is the SDK's own reading of the variables. The SDK and the OTLP/HTTP exporter are the
``otel`` extra (``pip install 'ext-tasks[otel]'``), imported only when tracing is asked for.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from . import tracing

_lock = threading.Lock()


class TracingUnavailable(RuntimeError):
    """The variables ask for tracing but the SDK (the ``otel`` extra) is not installed, or asks for an
    exporter this build does not have."""


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the ``OTEL_*`` variables turn tracing on (see the module's docstring)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def configure(service_name: str = "ext-tasks", environ: Mapping[str, str] | None = None) -> bool:
    """Turn tracing on for this process if the variables ask for it: ``True`` when this call did (the
    caller then calls :func:`shutdown` when it stops), ``False`` when they do not ask or it already is.

    The SDK's tracer provider reads the sampler (``OTEL_TRACES_SAMPLER[_ARG]``), the resource
    (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``; ``service_name`` when neither names the
    service) and the batch processor's delays (``OTEL_BSP_*``); the exporters are ``otlp``
    (OTLP/HTTP protobuf, ``OTEL_EXPORTER_OTLP_*``) and ``console``."""
    env = os.environ if environ is None else environ
    with _lock:
        if tracing.tracer is not None:
            return False
        if not wanted(env):
            return False
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
        except ImportError:
            raise TracingUnavailable(
                "OTEL_* variables ask for tracing but the OpenTelemetry SDK is not installed: "
                "pip install 'ext-tasks[otel]'"
            ) from None
        attributes: dict[str, Any] = {"process.pid": os.getpid()}
        if not env.get("OTEL_SERVICE_NAME") and "service.name=" not in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
            attributes["service.name"] = service_name
        provider = TracerProvider(resource=Resource.create(attributes))
        names = [name.strip().lower() for name in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if name.strip()]
        for name in names:
            exporter: SpanExporter
            if name == "otlp":
                protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                if protocol not in (None, "", "http/protobuf"):
                    raise TracingUnavailable(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: only http/protobuf is built in")
                try:
                    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
                except ImportError:
                    raise TracingUnavailable(
                        "the OTLP/HTTP exporter is not installed: pip install 'ext-tasks[otel]'"
                    ) from None
                exporter = OTLPSpanExporter()
            elif name == "console":
                exporter = ConsoleSpanExporter()
            else:
                raise TracingUnavailable(f"OTEL_TRACES_EXPORTER={name}: the exporters are otlp and console")
            provider.add_span_processor(BatchSpanProcessor(exporter))
        tracing.use_provider(provider)
        return True


def shutdown() -> None:
    """Export what is still batched and stop (process shutdown; a no-op when tracing is off)."""
    provider = tracing.current_provider()
    if provider is not None:
        provider.shutdown()
