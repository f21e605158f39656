-- wrk script: POST "John Doe" (the article's workload).
wrk.method = "POST"
wrk.body = "John Doe"
wrk.headers["Content-Type"] = "text/plain"
