"""Reports: summaries and inspect, figures and the HTML page, the drawing process."""
