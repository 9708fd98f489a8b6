// The Java side of the broker kill campaign (tests/reliability/test_broker_kill.py): a producer that
// records every message the broker acknowledged with SEND_OK, and a push consumer that records every
// message it was given. Both run until told to stop; the test kills and restarts the broker under them.
//
//   java KillPeer produce NAMESRV TOPIC OUT STOPFILE   -> lines "OK <key> <queueId> <queueOffset>"
//   java KillPeer consume NAMESRV TOPIC GROUP OUT      -> lines "GOT <key> <queueId> <queueOffset>"
//
// Only the shipped RocketMQ 4.9.8 client API is used (DefaultMQProducer, DefaultMQPushConsumer).

import java.io.File;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class KillPeer {
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "produce": produce(args[1], args[2], args[3], args[4]); break;
            case "consume": consume(args[1], args[2], args[3], args[4]); break;
            default: throw new IllegalArgumentException("unknown mode " + args[0]);
        }
    }

    static void produce(String ns, String topic, String out, String stopFile) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("kill-producer");
        producer.setNamesrvAddr(ns);
        producer.setSendMsgTimeout(3000);
        producer.setRetryTimesWhenSendFailed(2);
        producer.start();
        PrintStream log = new PrintStream(new FileOutputStream(out, true), true, "UTF-8");
        File stop = new File(stopFile);
        long i = 0;
        while (!stop.exists()) {
            String key = "m-" + i++;
            Message msg = new Message(topic, "TagK", key, key.getBytes(StandardCharsets.UTF_8));
            try {
                SendResult r = producer.send(msg);
                if (r.getSendStatus() == SendStatus.SEND_OK) {
                    log.println("OK " + key + " " + r.getMessageQueue().getQueueId() + " " + r.getQueueOffset());
                } else {
                    log.println("STATUS " + key + " " + r.getSendStatus());
                }
            } catch (Exception e) {
                log.println("ERR " + key + " " + e.getClass().getSimpleName());
                Thread.sleep(100);
            }
        }
        log.println("DONE " + i);
        producer.shutdown();
        System.exit(0);
    }

    static void consume(String ns, String topic, String group, String out) throws Exception {
        PrintStream log = new PrintStream(new FileOutputStream(out, true), true, "UTF-8");
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(ns);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            synchronized (log) {
                for (MessageExt m : msgs) {
                    log.println("GOT " + m.getKeys() + " " + m.getQueueId() + " " + m.getQueueOffset());
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        log.println("STARTED");
        Runtime.getRuntime().addShutdownHook(new Thread(consumer::shutdown));
        Thread.sleep(Long.MAX_VALUE);
    }
}
