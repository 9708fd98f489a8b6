import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import com.alibaba.fastjson.JSON;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The Java side of the transactional-message scenario (tests/client/test_transaction_brokers.py), with the
 * shipped RocketMQ 4.9.8 client only: a TransactionMQProducer and a DefaultMQPushConsumer. Every stdout line
 * is one JSON object.
 *
 *   TxScenario NS TOPIC GROUP CHECK_MAX TIMEOUT_S
 *       The producer (group GROUP) sends four messages to TOPIC, keys "c", "r", "u", "later"; its
 *       executeLocalTransaction answers COMMIT_MESSAGE for "c", ROLLBACK_MESSAGE for "r", UNKNOW for the
 *       others; checkLocalTransaction answers COMMIT_MESSAGE for "later" and UNKNOW for the rest. One line
 *       per send {"sent", "status", "state", "queueId", "queueOffset", "msgId", "offsetMsgId"} and per
 *       check-back {"check", "times" (TRANSACTION_CHECK_TIMES), "topic", "queueId"}. A push consumer (group
 *       GROUP + "_c", from the first offset) prints {"recv", "sysFlag", "queueId", "props"} per message. Ends
 *       when "c" and "later" were received and "u" was checked CHECK_MAX times, or at TIMEOUT_S; last line
 *       {"result": "DONE", "received": n, "checks": n}.
 */
public final class TxScenario {
    private static final Object OUT = new Object();

    private static void emit(Map<String, Object> line) {
        synchronized (OUT) {
            System.out.println(JSON.toJSONString(line));
            System.out.flush();
        }
    }

    private static Map<String, Object> line(String key, Object value) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put(key, value);
        return m;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: TxScenario NS TOPIC GROUP CHECK_MAX TIMEOUT_S");
            System.exit(2);
        }
        String ns = args[0], topic = args[1], group = args[2];
        int checkMax = Integer.parseInt(args[3]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[4]) * 1000L;
        Set<String> received = ConcurrentHashMap.newKeySet();
        AtomicInteger undecidedChecks = new AtomicInteger();
        AtomicInteger checks = new AtomicInteger();

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group + "_c");
        consumer.setNamesrvAddr(ns);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                Map<String, Object> l = line("recv", m.getKeys());
                l.put("sysFlag", m.getSysFlag());
                l.put("queueId", m.getQueueId());
                l.put("props", m.getProperties());
                emit(l);
                received.add(m.getKeys());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        TransactionMQProducer producer = new TransactionMQProducer(group);
        producer.setNamesrvAddr(ns);
        producer.setSendMsgTimeout(15000);   // no retry (a second half message) on a loaded test machine
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                switch (msg.getKeys()) {
                    case "c": return LocalTransactionState.COMMIT_MESSAGE;
                    case "r": return LocalTransactionState.ROLLBACK_MESSAGE;
                    default: return LocalTransactionState.UNKNOW;
                }
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                Map<String, Object> l = line("check", msg.getKeys());
                l.put("times", msg.getProperty("TRANSACTION_CHECK_TIMES"));
                l.put("topic", msg.getTopic());
                l.put("queueId", msg.getQueueId());
                emit(l);
                checks.incrementAndGet();
                if ("u".equals(msg.getKeys())) {
                    undecidedChecks.incrementAndGet();
                }
                return "later".equals(msg.getKeys()) ? LocalTransactionState.COMMIT_MESSAGE
                    : LocalTransactionState.UNKNOW;
            }
        });
        producer.start();
        for (String key : new String[] {"c", "r", "u", "later"}) {
            Message msg = new Message(topic, "tg", key, ("body-" + key).getBytes("UTF-8"));
            TransactionSendResult r = producer.sendMessageInTransaction(msg, null);
            Map<String, Object> l = line("sent", key);
            l.put("status", r.getSendStatus().name());
            l.put("state", r.getLocalTransactionState().name());
            l.put("queueId", r.getMessageQueue().getQueueId());
            l.put("queueOffset", r.getQueueOffset());
            l.put("msgId", r.getMsgId());
            l.put("offsetMsgId", r.getOffsetMsgId());
            emit(l);
        }
        while (System.currentTimeMillis() < deadline
            && !(received.contains("c") && received.contains("later") && undecidedChecks.get() >= checkMax)) {
            Thread.sleep(50);
        }
        Map<String, Object> done = line("result", "DONE");
        done.put("received", received.size());
        done.put("checks", checks.get());
        emit(done);
        producer.shutdown();
        consumer.shutdown();
        System.exit(0);
    }
}
