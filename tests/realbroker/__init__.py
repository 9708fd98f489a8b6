"""Real Apache RocketMQ 4.9.8 peers for tests: start/stop name servers and brokers (``peers``), the Java
workload/oracle program (``tests/java/RealStorePeer.java``), and the real-store generator
(``python -m tests.realbroker.make_store OUTDIR --variant clean|abort|retention|aged``)."""
