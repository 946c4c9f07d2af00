// Command client is an apportion scheduler client in Go: it lists the policies, solves a
// snapshot file, and reads the field violations of a rejected request (google.rpc.BadRequest).
//
//	go generate && go mod tidy && go build -o client .
//	apportion serve --port 50051 &
//	./client -addr 127.0.0.1:50051 ../../four_jobs.json ../../invalid.json
//
// Arguments: a snapshot file (the canonical JSON of apportion.v1.SolveRequest, default
// ../../four_jobs.json) and a snapshot the server must reject (default ../../invalid.json).
// -json prints one JSON object instead of text.
package main

//go:generate bash generate.sh

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	apportionv1 "github.com/apportion/apportion/examples/clients/go/apportionv1"
)

const callTimeout = 60 * time.Second

type policyOut struct {
	Name            string   `json:"name"`
	ParametersField string   `json:"parametersField"`
	PlanKind        string   `json:"planKind"`
	RequiredInputs  []string `json:"requiredInputs"`
}

type solveOut struct {
	Termination string                        `json:"termination"`
	Objective   float64                       `json:"objective"`
	Jobs        map[string]map[string]float64 `json:"jobs"`
}

type violationOut struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

type output struct {
	Policies   []policyOut    `json:"policies"`
	Solve      solveOut       `json:"solve"`
	BadRequest []violationOut `json:"badRequest"`
}

// readRequest parses a snapshot file: the canonical JSON of a SolveRequest.
func readRequest(path string) (*apportionv1.SolveRequest, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	request := &apportionv1.SolveRequest{}
	if err := protojson.Unmarshal(text, request); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return request, nil
}

// badRequest is the google.rpc.BadRequest detail of a failed call, nil when there is none.
func badRequest(err error) *errdetails.BadRequest {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, detail := range st.Details() {
		if found, ok := detail.(*errdetails.BadRequest); ok {
			return found
		}
	}
	return nil
}

func run(address, snapshotFile, invalidFile string) (*output, error) {
	// grpc.WithInsecure: plain text on a trusted network (newer grpc-go also offers
	// credentials/insecure); use grpc.WithTransportCredentials for a TLS server.
	conn, err := grpc.Dial(address, grpc.WithInsecure())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	client := apportionv1.NewAllocationServiceClient(conn)
	out := &output{}

	// 1. What the server offers. ParametersField names the Policy oneof field that carries a
	// policy's parameters (e.g. cost_normalized_throughput -> cost_throughput).
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	listed, err := client.ListPolicies(ctx, &apportionv1.ListPoliciesRequest{})
	if err != nil {
		return nil, err
	}
	for _, p := range listed.GetPolicies() {
		out.Policies = append(out.Policies, policyOut{
			Name:            p.GetName(),
			ParametersField: p.GetParametersField(),
			PlanKind:        p.GetCapabilities().GetPlanKind().String(),
			RequiredInputs:  p.GetRequiredInputs(),
		})
	}

	// 2. Solve a snapshot file.
	request, err := readRequest(snapshotFile)
	if err != nil {
		return nil, err
	}
	response, err := client.Solve(ctx, request)
	if err != nil {
		return nil, err
	}
	out.Solve = solveOut{
		Termination: response.GetStats().GetTermination().String(),
		Objective:   response.GetStats().GetObjective(),
		Jobs:        map[string]map[string]float64{},
	}
	for _, job := range response.GetPlan().GetJobs() {
		out.Solve.Jobs[job.GetJobId()] = job.GetTimeShare()
	}

	// 3. A rejected request: INVALID_ARGUMENT with one field violation per problem.
	invalid, err := readRequest(invalidFile)
	if err != nil {
		return nil, err
	}
	if _, err := client.Solve(ctx, invalid); status.Code(err) != codes.InvalidArgument {
		return nil, fmt.Errorf("%s: expected INVALID_ARGUMENT, got %v", invalidFile, err)
	} else if detail := badRequest(err); detail != nil {
		for _, v := range detail.GetFieldViolations() {
			out.BadRequest = append(out.BadRequest, violationOut{v.GetField(), v.GetDescription()})
		}
	}
	return out, nil
}

func main() {
	address := flag.String("addr", "127.0.0.1:50051", "server address")
	asJSON := flag.Bool("json", false, "print one JSON object")
	flag.Parse()
	snapshotFile, invalidFile := "../../four_jobs.json", "../../invalid.json"
	if flag.NArg() >= 1 {
		snapshotFile = flag.Arg(0)
	}
	if flag.NArg() >= 2 {
		invalidFile = flag.Arg(1)
	}
	out, err := run(*address, snapshotFile, invalidFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	if *asJSON {
		encoded, _ := json.Marshal(out)
		fmt.Println(string(encoded))
		return
	}
	fmt.Printf("%d policies:\n", len(out.Policies))
	for _, p := range out.Policies {
		fmt.Printf("  %-32s %-26s %s\n", p.Name, p.PlanKind, p.ParametersField)
	}
	fmt.Printf("\nsolve: %s, objective %g\n", out.Solve.Termination, out.Solve.Objective)
	ids := make([]string, 0, len(out.Solve.Jobs))
	for id := range out.Solve.Jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Printf("  %-16s %v\n", id, out.Solve.Jobs[id])
	}
	fmt.Printf("\nrejected (%d field violations):\n", len(out.BadRequest))
	for _, v := range out.BadRequest {
		fmt.Printf("  %s: %s\n", v.Field, v.Description)
	}
}
