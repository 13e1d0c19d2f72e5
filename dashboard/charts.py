"""Plotly figures built on the server from database rows (the page only draws them)."""
from __future__ import annotations

from datetime import datetime

import plotly.graph_objects as go


def lag_figure(series: list[tuple[datetime, int]], title: str) -> go.Figure:
    fig = go.Figure(
        go.Scatter(
            x=[t for t, _ in series],
            y=[v for _, v in series],
            mode="lines+markers",
            name="total lag",
            line={"shape": "hv"},
            hovertemplate="%{x}<br>%{y:,} messages<extra></extra>",
        )
    )
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        xaxis_title="time (UTC)",
        yaxis_title="lag (messages)",
        yaxis={"rangemode": "tozero"},
        margin={"l": 60, "r": 20, "t": 40, "b": 50},
        height=320,
        template="plotly_white",
    )
    if not series:
        fig.add_annotation(text="no lag samples in this range yet", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig
