package feed

import (
	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// NewAMQPTxPublisher returns watermill-amqp's own publisher configured as
// the feed's but with transactions, how the feed published before it used
// confirms: the benchmark's second yardstick. The topology is declared
// first, as the feed declares it.
func NewAMQPTxPublisher(url, exchange string) (*wamqp.Publisher, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := DeclareTopology(ch, exchange); err != nil {
		return nil, err
	}
	cfg := publisherConfig(url, exchange)
	cfg.Publish.Transactional = true
	return wamqp.NewPublisher(cfg, watermill.NopLogger{})
}
