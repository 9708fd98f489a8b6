"""Network mode: the Spark source over any RocketMQ cluster reachable by name server (ours or Apache's),
through RocketMQ's remoting protocol (:class:`rocketstream.client.api.MQClientAPI`).

* :mod:`.routes` — the process's client (one asyncio loop thread carrying every connection) and the
  name server's routes: which brokers hold readable queues of the topics.
* :mod:`.view` — :class:`~rocketstream.spark.network.view.NetworkBrokerView`, the planning side of a
  :class:`~rocketstream.spark.broker_view.BrokerView` over one broker's address (bounds, sizes, timestamp
  search, group offsets, commits), and :class:`~rocketstream.spark.network.view.NetworkBroker`, the
  picklable location a task carries.
* :mod:`.puller` — the executor side: PULL_MESSAGE of queue ranges, several in flight, decoded into Arrow.
"""
