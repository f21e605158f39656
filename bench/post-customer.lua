-- wrk script: POST a customer id (bench/db.sh: list that customer's orders).
wrk.method = "POST"
wrk.body = "c-42"
wrk.headers["Content-Type"] = "text/plain"
