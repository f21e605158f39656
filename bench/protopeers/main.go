// Command protopeers holds the fast peers of bench/protocols.py: a
// WebSocket echo server and load client (gorilla/websocket), and a gRPC
// echo server and load client (grpc-go, messages as raw bytes so nothing is
// generated). The test peers are Python's (tests/protocols); these are Go
// so that the peers cost little beside the proxy being measured.
//
//	protopeers ws-echo PORT
//	protopeers ws-load URL CONNECTIONS SECONDS SIZE
//	protopeers grpc-echo PORT
//	protopeers grpc-load TARGET AUTHORITY CONCURRENCY SECONDS SIZE
//
// The load clients run ping-pong on each connection (or each of
// CONCURRENCY calls in flight on one gRPC channel) and print one JSON
// object: messages (or calls), seconds, per second, p50 and p99 in
// microseconds, errors.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: protopeers ws-echo|ws-load|grpc-echo|grpc-load ...")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "ws-echo":
		wsEcho(args[0])
	case "ws-load":
		wsLoad(args[0], atoi(args[1]), atoi(args[2]), atoi(args[3]))
	case "grpc-echo":
		grpcEcho(args[0])
	case "grpc-load":
		grpcLoad(args[0], args[1], atoi(args[2]), atoi(args[3]), atoi(args[4]))
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

func wsEcho(port string) {
	upgrader := websocket.Upgrader{ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			kind, message, err := c.ReadMessage()
			if err != nil {
				return
			}
			if c.WriteMessage(kind, message) != nil {
				return
			}
		}
	})
	fmt.Println("ready")
	panic(http.ListenAndServe("127.0.0.1:"+port, nil))
}

// recorder gathers latencies from many goroutines.
type recorder struct {
	mu        sync.Mutex
	latencies []time.Duration
	errors    int
}

func (r *recorder) add(l []time.Duration, errors int) {
	r.mu.Lock()
	r.latencies = append(r.latencies, l...)
	r.errors += errors
	r.mu.Unlock()
}

func (r *recorder) report(took time.Duration) {
	sort.Slice(r.latencies, func(i, j int) bool { return r.latencies[i] < r.latencies[j] })
	at := func(q float64) float64 {
		if len(r.latencies) == 0 {
			return 0
		}
		return float64(r.latencies[int(q*float64(len(r.latencies)-1))].Microseconds())
	}
	out, _ := json.Marshal(map[string]any{
		"messages":   len(r.latencies),
		"seconds":    took.Seconds(),
		"per_second": float64(len(r.latencies)) / took.Seconds(),
		"p50_us":     at(0.50),
		"p99_us":     at(0.99),
		"errors":     r.errors,
	})
	fmt.Println(string(out))
}

func wsLoad(url string, connections, seconds, size int) {
	var rec recorder
	var wg sync.WaitGroup
	message := make([]byte, size)
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	started := time.Now()
	for i := 0; i < connections; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _, err := websocket.DefaultDialer.Dial(url, nil)
			if err != nil {
				rec.add(nil, 1)
				return
			}
			defer c.Close()
			var mine []time.Duration
			errors := 0
			for time.Now().Before(deadline) {
				sent := time.Now()
				if c.WriteMessage(websocket.BinaryMessage, message) != nil {
					errors++
					break
				}
				if _, got, err := c.ReadMessage(); err != nil || len(got) != size {
					errors++
					break
				}
				mine = append(mine, time.Since(sent))
			}
			rec.add(mine, errors)
		}()
	}
	wg.Wait()
	rec.report(time.Since(started))
}

// raw is a gRPC codec whose messages are byte slices as they are.
type raw struct{}

func (raw) Name() string { return "proto" }
func (raw) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case []byte:
		return m, nil
	case *[]byte:
		return *m, nil
	}
	return nil, fmt.Errorf("not bytes: %T", v)
}
func (raw) Unmarshal(data []byte, v any) error {
	m, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("not *[]byte: %T", v)
	}
	*m = append((*m)[:0], data...)
	return nil
}

func grpcEcho(port string) {
	server := grpc.NewServer(grpc.ForceServerCodec(raw{}))
	server.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Echo",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Unary",
			Handler: func(_ any, _ context.Context, decode func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var request []byte
				if err := decode(&request); err != nil {
					return nil, err
				}
				return request, nil
			},
		}},
	}, struct{}{})
	listener, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		panic(err)
	}
	fmt.Println("ready")
	panic(server.Serve(listener))
}

func grpcLoad(target, authority string, concurrency, seconds, size int) {
	options := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(raw{})),
	}
	if authority != "-" {
		options = append(options, grpc.WithAuthority(authority))
	}
	conn, err := grpc.NewClient(target, options...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	var rec recorder
	var wg sync.WaitGroup
	request := make([]byte, size)
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	started := time.Now()
	for i := 0; i < concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			errors := 0
			for time.Now().Before(deadline) {
				var answer []byte
				sent := time.Now()
				err := conn.Invoke(context.Background(), "/test.Echo/Unary", &request, &answer)
				if err != nil || len(answer) != size {
					errors++
					if errors > 100 {
						break
					}
					continue
				}
				mine = append(mine, time.Since(sent))
			}
			rec.add(mine, errors)
		}()
	}
	wg.Wait()
	rec.report(time.Since(started))
}
