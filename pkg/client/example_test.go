package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/agentbus/agentbus/pkg/client"
)

// Send a command, wait for its outcome and print the events it caused;
// then send one that breaks its schema and print why it was refused. It
// reaches the agentbus at AGENTBUS_URL (client.DefaultURL when unset;
// `make run` starts one there), with the API key AGENTBUS_KEY when it
// asks for one.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(client.Config{URL: os.Getenv("AGENTBUS_URL"), Key: os.Getenv("AGENTBUS_KEY")})
	if err != nil {
		log.Fatal(err)
	}
	trace, err := c.SendAndWait(ctx, client.Command{Type: "PlaceOrder",
		Data: json.RawMessage(`{"orderId":"ord-example","customer":"ada","items":[{"sku":"tea","quantity":2}],"currency":"EUR"}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(trace.Command.Type, trace.Status)
	for _, e := range trace.Events {
		fmt.Println(e.Type, string(e.Data))
	}

	_, err = c.Send(ctx, client.Command{Type: "PlaceOrder", Data: json.RawMessage(`{"orderId":"ord-example-2","items":[]}`)})
	var refusal *client.Error
	if errors.As(err, &refusal) {
		fmt.Println(refusal.Code)
		for _, v := range refusal.Violations() {
			fmt.Println(v.Path, v.Message)
		}
	}
	// Output:
	// PlaceOrder processed
	// OrderPlaced {"orderId":"ord-example","customer":"ada","items":[{"sku":"tea","quantity":2}],"currency":"EUR"}
	// VALIDATION_FAILED
	// $.data.currency currency is required
	// $.data.customer customer is required
	// $.data.items Array must have at least 1 items
}
